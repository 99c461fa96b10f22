// Units that users write in configuration files, parsed strictly and held as integers.
//
// Sizes follow Kubernetes quantities: SI suffixes are powers of 1000 (KB/MB/GB/TB/PB, or
// K/M/G/T/P), IEC suffixes powers of 1024 (KiB/MiB/GiB/TiB/PiB); a plain number is bytes.
// Bandwidth needs a unit: bits (bps, Kbps, Mbps, Gbps, Tbps, or Gb/s) or bytes (MB/s, GB/s,
// TB/s). Durations: plain seconds or ns/us/ms/s/m/h/d suffixes.
//   int64_t b = *ParseSize("8MB");              // 8000000
//   Bandwidth nic = *ParseBandwidth("200Gbps"); // nic.GBps() == 25.0
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "tianshu/base/status.h"

namespace tianshu {

// Link or device bandwidth, held in bits per second so that sums and comparisons are exact.
struct Bandwidth {
  int64_t bits_per_sec = 0;

  static Bandwidth FromGbps(double gbps) { return {std::llround(gbps * 1e9)}; }
  static Bandwidth FromGBps(double gbytes) { return {std::llround(gbytes * 8e9)}; }
  double Gbps() const { return static_cast<double>(bits_per_sec) / 1e9; }
  double GBps() const { return static_cast<double>(bits_per_sec) / 8e9; }
  double BytesPerSec() const { return static_cast<double>(bits_per_sec) / 8.0; }
  bool IsZero() const { return bits_per_sec == 0; }

  Bandwidth operator+(Bandwidth o) const { return {bits_per_sec + o.bits_per_sec}; }
  Bandwidth& operator+=(Bandwidth o) {
    bits_per_sec += o.bits_per_sec;
    return *this;
  }
  Bandwidth operator*(int64_t k) const { return {bits_per_sec * k}; }
  auto operator<=>(const Bandwidth&) const = default;
};

// Parses a size ("8MB", "512KiB", "1GiB", "4096"). Rejects negatives, fractions of a byte,
// unknown suffixes and overflow, with a message naming the text.
[[nodiscard]] Result<int64_t> ParseSize(std::string_view text);
[[nodiscard]] Result<Bandwidth> ParseBandwidth(std::string_view text);
// Duration in nanoseconds; "1800" is seconds.
[[nodiscard]] Result<int64_t> ParseDurationNs(std::string_view text);

// Human-readable forms used by tables: "80 GiB", "1.6 Tb/s", "30m".
std::string FormatBytes(double bytes);
std::string FormatBandwidth(Bandwidth bw);
std::string FormatSeconds(double seconds);

}  // namespace tianshu
