// Timestamps as traces write them.
//   ParseUtcTimestamp("2017-10-09 07:01:55")  // 1507532515
#pragma once

#include <optional>
#include <string_view>

namespace tianshu {

// Parses "2017-10-09 07:01:55" (UTC) or a date ("2017-10-09") into seconds since the epoch, as
// timegm counts them (a day past the end of its month counts on into the next); nullopt where
// the text is neither or a field is out of range.
std::optional<double> ParseUtcTimestamp(std::string_view text);

}  // namespace tianshu
