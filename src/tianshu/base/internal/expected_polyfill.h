// A minimal std::expected / std::unexpected for compilers whose standard library does not
// offer them to that compiler: clang 14 with libstdc++ 12 (used for libFuzzer targets and
// clang-tidy) cannot compile libstdc++'s <expected>. g++ builds never include this file.
// It covers what Tianshu uses: construction from a value or std::unexpected, has_value,
// operator bool, *, ->, value, error, value_or, and the void specialisation.
//   std::expected<int, Error> r = std::unexpected(Error{"no"});
//   if (!r) use(r.error());
#pragma once

#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

namespace std {  // NOLINT(cert-dcl58-cpp): only where the library lacks these names

template <class E>
class unexpected {
 public:
  constexpr explicit unexpected(const E& e) : e_(e) {}
  constexpr explicit unexpected(E&& e) : e_(std::move(e)) {}
  constexpr const E& error() const& { return e_; }
  constexpr E& error() & { return e_; }
  constexpr E&& error() && { return std::move(e_); }

 private:
  E e_;
};
template <class E>
unexpected(E) -> unexpected<E>;

template <class T, class E>
class expected {
 public:
  using value_type = T;
  using error_type = E;
  constexpr expected() : v_(std::in_place_index<0>) {}
  template <class U = T, class = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                  !std::is_same_v<std::decay_t<U>, expected> &&
                                                  !std::is_same_v<std::decay_t<U>, unexpected<E>>>>
  constexpr expected(U&& v) : v_(std::in_place_index<0>, std::forward<U>(v)) {}
  template <class G>
  constexpr expected(const unexpected<G>& u) : v_(std::in_place_index<1>, u.error()) {}
  template <class G>
  constexpr expected(unexpected<G>&& u) : v_(std::in_place_index<1>, std::move(u).error()) {}

  constexpr bool has_value() const { return v_.index() == 0; }
  constexpr explicit operator bool() const { return has_value(); }
  constexpr T& operator*() & { return std::get<0>(v_); }
  constexpr const T& operator*() const& { return std::get<0>(v_); }
  constexpr T&& operator*() && { return std::get<0>(std::move(v_)); }
  constexpr T* operator->() { return &std::get<0>(v_); }
  constexpr const T* operator->() const { return &std::get<0>(v_); }
  constexpr T& value() & { return std::get<0>(v_); }
  constexpr const T& value() const& { return std::get<0>(v_); }
  constexpr T&& value() && { return std::get<0>(std::move(v_)); }
  constexpr E& error() & { return std::get<1>(v_); }
  constexpr const E& error() const& { return std::get<1>(v_); }
  constexpr E&& error() && { return std::get<1>(std::move(v_)); }
  template <class U>
  constexpr T value_or(U&& u) const& {
    return has_value() ? **this : static_cast<T>(std::forward<U>(u));
  }

 private:
  std::variant<T, E> v_;
};

template <class E>
class expected<void, E> {
 public:
  using value_type = void;
  using error_type = E;
  constexpr expected() = default;
  template <class G>
  constexpr expected(const unexpected<G>& u) : e_(u.error()), ok_(false) {}
  template <class G>
  constexpr expected(unexpected<G>&& u) : e_(std::move(u).error()), ok_(false) {}
  constexpr bool has_value() const { return ok_; }
  constexpr explicit operator bool() const { return ok_; }
  constexpr void value() const {}
  constexpr void operator*() const {}
  constexpr E& error() & { return e_; }
  constexpr const E& error() const& { return e_; }

 private:
  E e_{};
  bool ok_ = true;
};

}  // namespace std
