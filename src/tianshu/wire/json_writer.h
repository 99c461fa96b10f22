// JSON text written straight into a string, for records the server writes by the thousand
// (a job's record at every change of it): no document tree built and thrown away. The text is
// what wire::Dump gives for the same document when the caller writes each object's keys in
// sorted order (nlohmann's objects are sorted maps): compact, numbers as nlohmann prints them
// (a float always with a '.' or an exponent; NaN and infinities as null), strings escaped as
// it escapes them, and invalid UTF-8 replaced by U+FFFD as Dump's error handler does.
//
//   std::string s;
//   wire::JsonWriter w(&s);
//   w.BeginObject();
//   w.Key("gpus"), w.Int(8);
//   w.Key("name"), w.String("llama");
//   w.EndObject();  // s == R"({"gpus":8,"name":"llama"})"
//
// The writer checks nothing about the shape: a key outside an object, or a missing value, is
// the caller's bug. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tianshu::wire {

class JsonWriter {
 public:
  explicit JsonWriter(std::string* out) : out_(out) {}

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  void Key(std::string_view key);
  void String(std::string_view s);
  void Int(int64_t v);
  void Double(double v);
  void Bool(bool v);

  // An array of strings or of ints (a vector, a set), and an object of strings or of ints from a
  // map (in its order, which is sorted).
  template <typename Range>
  void Array(const Range& v) {
    BeginArray();
    for (const auto& x : v) Write(x);
    EndArray();
  }
  template <typename V>
  void Object(const std::map<std::string, V>& m) {
    BeginObject();
    for (const auto& [k, x] : m) {
      Key(k);
      Write(x);
    }
    EndObject();
  }

 private:
  void Write(std::string_view s) { String(s); }
  void Write(int64_t v) { Int(v); }
  void BeforeValue();
  std::string* out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

// `s` as a JSON string literal, quotes included, appended to `out`.
void AppendJsonString(std::string* out, std::string_view s);

}  // namespace tianshu::wire
