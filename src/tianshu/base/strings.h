// Small string helpers shared by every module: splitting, trimming, edit distance for
// "did you mean" suggestions, and number formatting for tables.
//   auto parts = SplitString("a,b,,c", ',');           // {"a","b","","c"}
//   std::string s = NearestWord("schedular", {"scheduler", "cluster"});  // "scheduler"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tianshu {

std::vector<std::string> SplitString(std::string_view s, char sep);
// Reading a text in place, without allocating (the /proc files an agent reads at every
// heartbeat): the line of `s` that starts at `*at`, without its '\n', and the next field of
// `s` from `*at` (fields are separated by spaces and tabs, and end at a '\n'; "" when none is
// left). Each moves `*at` past what it returns.
//   for (size_t at = 0; at < text.size();) { auto line = NextLine(text, &at); ... }
std::string_view NextLine(std::string_view s, size_t* at);
std::string_view NextField(std::string_view s, size_t* at);
std::string_view Trim(std::string_view s);
std::string ToLower(std::string_view s);
bool StartsWith(std::string_view s, std::string_view prefix);
bool EndsWith(std::string_view s, std::string_view suffix);

// Levenshtein distance, case-insensitive.
int EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" when none is close enough to be a plausible typo
// (distance at most max(2, |word|/3)).
std::string NearestWord(std::string_view word, const std::vector<std::string>& candidates);

// Joins with a separator.
std::string Join(const std::vector<std::string>& parts, std::string_view sep);

// Strict decimal parses of a whole string; nullopt-like failure via bool.
bool ParseInt64(std::string_view s, int64_t* out);
bool ParseDouble(std::string_view s, double* out);

// Whether the arrays and objects of a JSON text nest at most `limit` deep, found by one scan
// of its bytes (brackets inside strings do not count) before any parser sees it: nlohmann::json
// builds and destroys documents recursively, so a body of 100,000 '[' would exhaust the stack.
// A malformed text is judged by its brackets alone (the parser reports the rest).
bool JsonNestingWithin(std::string_view text, int limit);

// `s` made safe to print on a terminal: control characters (C0, DEL, C1), Unicode bidi
// controls and invalid UTF-8 are shown escaped (\x1b, \u{202e}); other text, UTF-8 included, is
// kept. What a user sent (a job name, a message) can then neither forge a row nor move the
// cursor nor reorder what follows it.
std::string ForTerminal(std::string_view s);

}  // namespace tianshu
