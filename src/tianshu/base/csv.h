// Comma-separated values as RFC 4180 defines them, for every CSV Tianshu reads (traces, cluster
// lists, bandwidth probes) or writes (the simulator's per-job table): fields in double quotes may
// hold commas, line breaks and quotes (doubled: ""); lines end in LF or CRLF. A malformed text is
// an error that names the file, the line and the column where it goes wrong.
//   auto records = ParseCsv("philly.csv", text);  // records->at(0).fields: the header
//   out << CsvLine({"job 1", "says \"hi\", twice"});  // job 1,"says ""hi"", twice"
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tianshu/base/status.h"

namespace tianshu {

struct CsvOptions {
  // Drop spaces and tabs around unquoted fields. Around a quoted field they are always dropped
  // (`a, "b"` is a and b): the quotes mark where the field's text is.
  bool trim = false;
  // When set, this character outside quotes starts a comment that runs to the end of the line
  // ('#' for the bandwidth probes' files). '\0': no comments.
  char comment = '\0';
};

// Where a field starts: 1-based line and byte column of its first character (its opening quote
// when quoted).
struct CsvPosition {
  int line = 0;
  int column = 0;
};

// One record: a line, or several when a quoted field holds a line break.
struct CsvRecord {
  int line = 0;  // where the record starts
  std::vector<std::string> fields;
  std::vector<CsvPosition> positions;  // one per field
};

// A malformed text: an unclosed quote (at the quote that opens it), something other than a
// comma or a line end after a closing quote, or a quote inside an unquoted field.
struct CsvError {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;

  // "file:line:column: message"
  std::string ToString() const;
  // The same as an Error, for functions that return Result.
  Error ToError() const { return Error{ToString()}; }
};

// Every record of `text`, in order. Blank lines (nothing but spaces, tabs or a comment) are
// skipped; a UTF-8 byte-order mark at the start is ignored. `file` only names the text in
// errors. Pure function; no I/O.
[[nodiscard]] std::expected<std::vector<CsvRecord>, CsvError> ParseCsv(
    std::string_view file, std::string_view text, const CsvOptions& options = {});

// One field as RFC 4180 writes it: in quotes, with its quotes doubled, when it holds a comma, a
// quote, a line break or spaces at either end (which a trimming reader would drop); as it is
// otherwise.
std::string CsvField(std::string_view value);

// Fields written with CsvField, joined by commas, ended by "\n".
std::string CsvLine(const std::vector<std::string>& fields);

}  // namespace tianshu
