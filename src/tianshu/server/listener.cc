#include "tianshu/server/listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tianshu::server {

bool ClientShares::Admit(const std::string& address) {
  std::lock_guard lock(mu_);
  size_t& held = held_[address];
  if (total_ >= max_workers_ / 2 && held >= Share()) {
    if (held == 0) held_.erase(address);
    ++refused_;
    return false;
  }
  ++held;
  ++total_;
  return true;
}

void ClientShares::Release(const std::string& address) {
  std::lock_guard lock(mu_);
  auto it = held_.find(address);
  if (it == held_.end() || it->second == 0) return;
  if (--it->second == 0) held_.erase(it);
  --total_;
}

size_t ClientShares::Held(const std::string& address) const {
  std::lock_guard lock(mu_);
  auto it = held_.find(address);
  return it == held_.end() ? 0 : it->second;
}

size_t ClientShares::Total() const {
  std::lock_guard lock(mu_);
  return total_;
}

Result<std::unique_ptr<Listener>> Listener::Open(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Fail("cannot listen on ", host, ": ", ::gai_strerror(rc));
  }
  std::string last = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 4096) != 0) {
      last = std::strerror(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    const int actual = bound.ss_family == AF_INET6
                           ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                           : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    ::freeaddrinfo(found);
    return std::unique_ptr<Listener>(new Listener(fd, actual));
  }
  ::freeaddrinfo(found);
  return Fail("cannot listen on ", host, ":", service, ": ", last);
}

Listener::~Listener() { Stop(); }

void Listener::Run(std::function<void(int sock, const std::string& peer)> serve) {
  thread_ = std::thread([this, serve = std::move(serve)] {
    while (!stopping_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      int sock = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
      if (sock < 0) {
        // EMFILE and the like: back off a little instead of spinning on the ready socket.
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) ::usleep(10000);
        continue;
      }
      char text[INET6_ADDRSTRLEN] = {0};
      if (peer.ss_family == AF_INET6) {
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, text,
                    sizeof text);
      } else {
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, text, sizeof text);
      }
      serve(sock, text);
    }
  });
}

void Listener::Stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
}

}  // namespace tianshu::server
