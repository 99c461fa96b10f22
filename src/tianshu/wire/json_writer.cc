#include "tianshu/wire/json_writer.h"

#include <charconv>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace tianshu::wire {

namespace {

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one (no overlong forms,
// no surrogates, nothing above U+10FFFF: what nlohmann's decoder accepts).
size_t Utf8Length(std::string_view s, size_t i) {
  auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    if (k >= s.size()) return false;
    const auto b = static_cast<unsigned char>(s[k]);
    return b >= lo && b <= hi;
  };
  const auto c = static_cast<unsigned char>(s[i]);
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c == 0xE0) return cont(i + 1, 0xA0) && cont(i + 2) ? 3 : 0;
  if (c == 0xED) return cont(i + 1, 0x80, 0x9F) && cont(i + 2) ? 3 : 0;
  if (c >= 0xE1 && c <= 0xEF) return cont(i + 1) && cont(i + 2) ? 3 : 0;
  if (c == 0xF0) return cont(i + 1, 0x90) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  if (c == 0xF4) return cont(i + 1, 0x80, 0x8F) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  return 0;
}

}  // namespace

void AppendJsonString(std::string* out, std::string_view s) {
  const size_t start = out->size();
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    // The run of bytes written as they are (printable ASCII but '"' and '\\'), in one append.
    size_t run = i;
    while (run < s.size()) {
      const auto c = static_cast<unsigned char>(s[run]);
      if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') break;
      ++run;
    }
    out->append(s.data() + i, run - i);
    i = run;
    if (i == s.size()) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = Utf8Length(s, i);
      if (n == 0) {
        // Not UTF-8: nlohmann's replacement (U+FFFD, resuming where its decoder does) is the
        // authority, so the whole string goes through it.
        out->resize(start);
        out->append(nlohmann::json(std::string(s))
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        return;
      }
      out->append(s.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default: {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        out->append(buf);
      }
    }
    ++i;
  }
  out->push_back('"');
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_->push_back(',');
    first_.back() = false;
  }
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_->push_back('{');
  first_.push_back(true);
}

void JsonWriter::EndObject() {
  out_->push_back('}');
  first_.pop_back();
}

void JsonWriter::BeginArray() {
  BeforeValue();
  out_->push_back('[');
  first_.push_back(true);
}

void JsonWriter::EndArray() {
  out_->push_back(']');
  first_.pop_back();
}

void JsonWriter::Key(std::string_view key) {
  BeforeValue();
  AppendJsonString(out_, key);
  out_->push_back(':');
  after_key_ = true;
}

void JsonWriter::String(std::string_view s) {
  BeforeValue();
  AppendJsonString(out_, s);
}

void JsonWriter::Int(int64_t v) {
  BeforeValue();
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out_->append(buf, end);
}

void JsonWriter::Double(double v) {
  BeforeValue();
  // nlohmann's own printing (Grisu2, ".0" on integral values, null for NaN and infinities):
  // a record holds a handful of these.
  out_->append(nlohmann::json(v).dump());
}

void JsonWriter::Bool(bool v) {
  BeforeValue();
  out_->append(v ? "true" : "false");
}

}  // namespace tianshu::wire
