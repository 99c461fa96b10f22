#include "tianshu/base/csv.h"

#include <utility>

namespace tianshu {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// A cursor over the text that knows its line and column (1-based, in bytes).
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}
  bool Done() const { return at_ >= text_.size(); }
  char Peek() const { return text_[at_]; }
  // A line ends at "\n", at "\r\n", or at a "\r" that ends the text.
  bool AtLineEnd() const {
    if (Done()) return false;
    if (text_[at_] == '\n') return true;
    return text_[at_] == '\r' && (at_ + 1 == text_.size() || text_[at_ + 1] == '\n');
  }
  // Steps over one character, or over a whole line end.
  void Next() {
    if (AtLineEnd()) {
      at_ += text_[at_] == '\r' && at_ + 1 < text_.size() ? 2 : 1;
      ++line_;
      column_ = 1;
    } else {
      ++at_;
      ++column_;
    }
  }
  // The line end under the cursor, as written (kept inside quoted fields).
  std::string_view LineEnd() const {
    return text_.substr(at_, text_[at_] == '\r' && at_ + 1 < text_.size() ? 2 : 1);
  }
  size_t Offset() const { return at_; }
  CsvPosition Position() const { return {line_, column_}; }

 private:
  std::string_view text_;
  size_t at_ = 0;
  int line_ = 1;
  int column_ = 1;
};

}  // namespace

std::string CsvError::ToString() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

std::expected<std::vector<CsvRecord>, CsvError> ParseCsv(std::string_view file,
                                                         std::string_view text,
                                                         const CsvOptions& options) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  auto fail = [&](CsvPosition p, std::string message) {
    return std::unexpected(CsvError{std::string(file), p.line, p.column, std::move(message)});
  };
  auto ends_field = [&](const Cursor& c) {
    return c.Done() || c.AtLineEnd() || c.Peek() == ',' ||
           (options.comment != '\0' && c.Peek() == options.comment);
  };
  std::vector<CsvRecord> records;
  Cursor c(text);
  while (!c.Done()) {
    CsvRecord record;
    record.line = c.Position().line;
    bool quoted_any = false;
    while (true) {  // one field per pass
      const CsvPosition before = c.Position();
      const size_t start = c.Offset();
      while (!c.Done() && IsBlank(c.Peek())) c.Next();
      std::string field;
      CsvPosition at = c.Position();
      const size_t text_start = c.Offset();
      if (!c.Done() && c.Peek() == '"') {
        quoted_any = true;
        const CsvPosition open = c.Position();
        c.Next();
        while (true) {
          if (c.Done()) return fail(open, "a quoted field is not closed (its quote opens here)");
          if (c.AtLineEnd()) {
            field += c.LineEnd();
            c.Next();
          } else if (c.Peek() == '"') {
            c.Next();
            if (c.Done() || c.Peek() != '"') break;
            field += '"';
            c.Next();
          } else {
            field += c.Peek();
            c.Next();
          }
        }
        while (!c.Done() && IsBlank(c.Peek())) c.Next();
        if (!ends_field(c)) {
          return fail(c.Position(), std::string("unexpected '") + c.Peek() +
                                        "' after a closing quote: a quoted field ends at a comma "
                                        "or a line end (a quote inside it is written \"\")");
        }
      } else {
        while (!ends_field(c)) {
          if (c.Peek() == '"') {
            return fail(c.Position(),
                        "a quote inside an unquoted field: put the field in quotes and double "
                        "the quote (\"a \"\"b\"\"\")");
          }
          c.Next();
        }
        size_t end = c.Offset();
        size_t from = start;
        if (options.trim) {
          from = text_start;
          while (end > from && IsBlank(text[end - 1])) --end;
        } else {
          at = before;
        }
        field.assign(text.substr(from, end - from));
      }
      record.fields.push_back(std::move(field));
      record.positions.push_back(at);
      if (!c.Done() && c.Peek() == ',') {
        c.Next();
        continue;
      }
      if (!c.Done() && options.comment != '\0' && c.Peek() == options.comment) {
        while (!c.Done() && !c.AtLineEnd()) c.Next();
      }
      if (!c.Done()) c.Next();  // the line end
      break;
    }
    // A blank line: one unquoted field of spaces or tabs (or nothing, or a comment).
    const bool blank = record.fields.size() == 1 && !quoted_any &&
                       record.fields[0].find_first_not_of(" \t") == std::string::npos;
    if (!blank) records.push_back(std::move(record));
  }
  return records;
}

std::string CsvField(std::string_view value) {
  const bool quote = value.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!value.empty() && (IsBlank(value.front()) || IsBlank(value.back())));
  if (!quote) return std::string(value);
  std::string out = "\"";
  for (char ch : value) {
    if (ch == '"') out += '"';
    out += ch;
  }
  out += '"';
  return out;
}

std::string CsvLine(const std::vector<std::string>& fields) {
  if (fields.size() == 1 && fields[0].empty()) return "\"\"\n";  // a blank line is skipped
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ',';
    out += CsvField(fields[i]);
  }
  out += '\n';
  return out;
}

}  // namespace tianshu
