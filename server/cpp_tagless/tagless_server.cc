// The lightweight-RPC study's service over the tagless transport, in C++: the HPRPC side of the study
// (../shared/papers/), set against the gRPC servers on the same link and devices.
//
// It answers as the Python server does (server/tagless_service.py, server/rpc_study_ops.py), with the
// codec generated from the same schema (contracts/rpc_study.tagless, build/tagless_study.h): frames
// over TCP, each connection's calls one after another; the decode, compute and encode stages' wall and
// thread CPU seconds as the reply's trailer when the request's flags ask (TIMING). A payload that does
// not decode is answered BAD_FRAME, an unknown method UNKNOWN_METHOD, a reply that would pass the body
// limit (a GetRandNums count, a SayHello name past 1 MiB) TOO_LARGE, and the connection goes on; a
// header that cannot be a request's (a status, a trailer, cut short) is answered BAD_FRAME and a payload
// past --max-body-mb TOO_LARGE, and then the connection is closed (its stream is out of step; what the
// peer still sends is read and dropped for up to a second first, so that the refusal reaches it). Calls'
// stages run one at a time across connections, each holding the host's CPU lock (TESTBED_CPU_LOCK,
// contracts/cpu_lock.py). The bytes held at once for calls, their request payloads and their replies until
// sent, are at most the body limit, as in Python: a call waits for room before it reads a payload or builds
// a reply (whose size is known once its request is decoded), at most 30 s; then it is answered BUSY and its
// connection closed. A payload must arrive within 300 s of its header, or the connection is closed without
// a reply. At most 64 connections at once (more are closed as they arrive), one silent for 120 s is closed.
//
//   tagless-server-cpp --port N [--bind ADDR] [--max-body-mb M] [--parent PID]
//
// It stops on SIGTERM or SIGINT, or when PID is no longer its parent. Nothing is printed per request.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "tagless_study.h"

namespace {

using tagless::Header;
using tagless::Status;

constexpr int kMaxConnections = 64;  // server/tagless_service.py MAX_CONNECTIONS
constexpr int kIdleSeconds = 120;    // server/tagless_service.py IDLE_S
constexpr int kPayloadSeconds = 300;    // server/tagless_service.py PAYLOAD_S: a payload's whole arrival
constexpr int kBudgetWaitSeconds = 30;  // server/tagless_service.py BUDGET_WAIT_S
constexpr size_t kMaxName = 1 << 20;    // server/rpc_study_ops.py MAX_NAME: SayHello's name, bytes
constexpr const char* kBusy = "the server holds its limit of payload bytes in other calls; try again";
constexpr int32_t kRandMax = INT32_MAX;  // GetRandNums: uniform in [0, 2^31 - 1]
constexpr double kMib = 1 << 20;

// A refused call: its status and message (server/rpc_study_ops.py raises these as TaglessError).
struct Refused {
  Status status;
  std::string message;
};

// contracts/cpu_lock.py: one timed CPU stage at a time on a host (flock on the file TESTBED_CPU_LOCK names).
class CpuLock {
 public:
  CpuLock() {
    const char* path = std::getenv("TESTBED_CPU_LOCK");
    if (path && *path) {
      fd_ = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) throw std::runtime_error(std::string("cannot open the CPU lock ") + path);
    }
  }
  void lock() const {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  void unlock() const {
    if (fd_ >= 0) ::flock(fd_, LOCK_UN);
  }

 private:
  int fd_ = -1;
};

// The bytes held at once for calls (request payloads, and replies until sent), at most the body limit: a
// call waits for room before it reads a payload or builds a reply, at most kBudgetWaitSeconds.
class Budget {
 public:
  explicit Budget(uint64_t limit) : limit_(limit) {}
  // Holds `n` bytes; false when no room came in time. A caller holding `own` bytes already never waits
  // for them: with nothing else held it goes on (a call's reply, itself at most the limit, may come
  // beside its own request's bytes: GetRandNums's reply of exactly the limit beside its 4-byte count).
  bool take(uint64_t n, uint64_t own) {
    if (!n) return true;
    std::unique_lock<std::mutex> lock(mutex_);
    auto room = [&] { return held_ + n <= limit_ || held_ == own; };
    if (!room_.wait_for(lock, std::chrono::seconds(kBudgetWaitSeconds), room))
      return false;
    held_ += n;
    return true;
  }
  void give(uint64_t n) {
    if (!n) return;
    std::lock_guard<std::mutex> lock(mutex_);
    held_ -= n;
    room_.notify_all();
  }

 private:
  uint64_t limit_, held_ = 0;
  std::mutex mutex_;
  std::condition_variable room_;
};

// The bytes one connection holds of the budget, given back however it ends.
class Held {
 public:
  explicit Held(Budget& budget) : budget_(budget) {}
  ~Held() { give_all(); }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  bool take(uint64_t n) {
    if (!budget_.take(n, n_)) return false;
    n_ += n;
    return true;
  }
  void give(uint64_t n) {
    n = std::min(n, n_);
    budget_.give(n);
    n_ -= n;
  }
  void give_all() { give(n_); }

 private:
  Budget& budget_;
  uint64_t n_ = 0;
};

// The clocks at a stage's edge: wall (steady) and this thread's CPU.
struct Mark {
  std::chrono::steady_clock::time_point wall;
  double cpu;

  static Mark now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return {std::chrono::steady_clock::now(), ts.tv_sec + ts.tv_nsec * 1e-9};
  }
  double wall_since(const Mark& start) const { return std::chrono::duration<double>(wall - start.wall).count(); }
};

std::string error_reply(const Header& request, Status status, const std::string& message) {
  std::string out;
  tagless::encode_error(out, request.call_id, request.method_id, status, message);
  return out;
}

class Service {
 public:
  explicit Service(uint64_t max_body) : max_body_(max_body), rng_(std::random_device{}()) {}

  uint64_t max_body() const { return max_body_; }

  // The reply frame to one request frame (its header and payload); the reply's payload bytes are taken of
  // `held` before it is built. `busy`: no room for them came in time (the reply is BUSY; close after it).
  std::string call(const Header& request, const std::string& payload, Held& held, bool& busy) {
    using namespace tagless;
    busy = false;
    try {
      switch (request.method_id) {
        case method::SayHello:
          if (payload.size() > 4 + kMaxName)
            throw Refused{Status::TOO_LARGE, "SayHello: a name past " + std::to_string(kMaxName) + " bytes"};
          return stages<Hello, Greeting>(
              request, payload, held, "SayHello", [&](const Hello&) { return payload.size() + 6; },
              [](const Hello& in, Greeting& out) { out.message = "Hello " + in.name; });
        case method::Average:
          return stages<Numbers, Mean>(
              request, payload, held, "Average", [](const Numbers&) { return uint64_t{8}; },
              [](const Numbers& in, Mean& out) {
                int64_t sum = 0;  // exact: a payload's values are at most 2^30, each below 2^31
                for (int32_t v : in.values) sum += v;
                out.value =
                    in.values.empty() ? 0.0 : static_cast<double>(sum) / static_cast<double>(in.values.size());
              });
        case method::GetRandNums:
          return stages<Count, Numbers>(
              request, payload, held, "GetRandNums",
              [](const Count& in) {
                if (in.n < 0) throw Refused{Status::BAD_FRAME, "GetRandNums: a count of " + std::to_string(in.n)};
                return 4 + 4 * static_cast<uint64_t>(in.n);
              },
              [this](const Count& in, Numbers& out) { draw(in.n, out); });
        case method::SendRcvLargeData128: return echo<LargeData128>(request, payload, held, "SendRcvLargeData128");
        case method::SendRcvLargeData256: return echo<LargeData256>(request, payload, held, "SendRcvLargeData256");
        case method::SendRcvLargeData512: return echo<LargeData512>(request, payload, held, "SendRcvLargeData512");
        case method::SendRcvLargeData1024: return echo<LargeData1024>(request, payload, held, "SendRcvLargeData1024");
        case method::SendRcvLargeData2048: return echo<LargeData2048>(request, payload, held, "SendRcvLargeData2048");
        case method::SendRcvLargeData4096: return echo<LargeData4096>(request, payload, held, "SendRcvLargeData4096");
        case method::SendRcvLargeData8192: return echo<LargeData8192>(request, payload, held, "SendRcvLargeData8192");
        default: return error_reply(request, Status::UNKNOWN_METHOD, "no method " + std::to_string(request.method_id));
      }
    } catch (const Refused& refused) {
      busy = refused.status == Status::BUSY;
      return error_reply(request, refused.status, refused.message);
    } catch (const std::exception& exc) {  // a bug, or no memory: logged, answered, and the server goes on
      std::fprintf(stderr, "[tagless-cpp] ERROR method %u failed: %s\n", request.method_id, exc.what());
      return error_reply(request, Status::INTERNAL, std::string("internal error: ") + exc.what());
    }
  }

 private:
  // Decode; the reply's size taken of the budget (refused past the body limit, BUSY when no room comes);
  // compute and encode. Each stage one at a time across calls (trials never share a CPU), none waiting for
  // the budget meanwhile. The reply frame, with the stage times when asked.
  template <typename Req, typename Rep, typename Size, typename Compute>
  std::string stages(const Header& request, const std::string& payload, Held& held, const char* name,
                     Size reply_size, Compute compute) {
    Req in;
    Rep out;
    std::string frame;
    Mark m0, m1;
    bool ok;
    {
      std::lock_guard<std::mutex> one_at_a_time(one_);
      std::lock_guard<const CpuLock> cpu(cpu_);  // waiting for it counts in no stage
      m0 = Mark::now();
      ok = in.decode(payload.data(), payload.size());
      m1 = Mark::now();
    }
    if (!ok) throw Refused{Status::BAD_FRAME, "the payload is not one request message of method " +
                                                  std::to_string(request.method_id)};
    uint64_t size = reply_size(static_cast<const Req&>(in));
    if (size > max_body_)
      throw Refused{Status::TOO_LARGE, std::string(name) + ": a reply of " + std::to_string(size) +
                                           " bytes passes the limit of " + std::to_string(max_body_)};
    if (!held.take(size)) throw Refused{Status::BUSY, kBusy};
    tagless::Timing timing;
    {
      std::lock_guard<std::mutex> one_at_a_time(one_);
      std::lock_guard<const CpuLock> cpu(cpu_);
      Mark c0 = Mark::now();
      compute(static_cast<const Req&>(in), out);
      Mark m2 = Mark::now();
      frame.reserve(tagless::kHeaderSize + out.size() + tagless::Timing::kSize);
      frame.resize(tagless::kHeaderSize);  // the payload goes in place, after the header written below
      out.encode(frame);
      Mark m3 = Mark::now();
      timing = {m1.wall_since(m0), m1.cpu - m0.cpu, m2.wall_since(c0), m2.cpu - c0.cpu, m3.wall_since(m2), m3.cpu - m2.cpu};
    }
    Header head;
    head.call_id = request.call_id;
    head.method_id = request.method_id;
    head.payload_length = static_cast<uint32_t>(frame.size() - tagless::kHeaderSize);
    if (request.flags & tagless::kTiming) {
      head.trailer_length = tagless::Timing::kSize;
      timing.encode(frame);
    }
    std::string bytes;
    head.encode(bytes);
    frame.replace(0, bytes.size(), bytes);
    return frame;
  }

  template <typename M>
  std::string echo(const Header& request, const std::string& payload, Held& held, const char* name) {
    return stages<M, M>(
        request, payload, held, name, [&](const M&) { return static_cast<uint64_t>(payload.size()); },
        [](const M& in, M& out) { out = in; });
  }

  // GetRandNums: n values uniform in [0, 2^31 - 1] (n checked, and its reply's bytes taken, before).
  void draw(int32_t n, tagless::Numbers& out) {
    std::uniform_int_distribution<int32_t> uniform(0, kRandMax);
    out.values.resize(static_cast<size_t>(n));
    for (int32_t& v : out.values) v = uniform(rng_);
  }

  uint64_t max_body_;
  std::mt19937 rng_;
  std::mutex one_;
  CpuLock cpu_;
};

// How a read ended: all its bytes, the peer's end first, or a failure (a reset, silence past the idle
// timeout, a payload's deadline passed).
enum class Read { all, end, failed };

// Exactly `n` bytes into `p` unless the stream ends or fails first (`got`: how many arrived); with a
// `deadline`, all of them by then, each wait also at most the idle timeout.
Read read_full(int fd, char* p, size_t n, size_t& got,
               const std::chrono::steady_clock::time_point* deadline = nullptr) {
  got = 0;
  while (got < n) {
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Read::failed;
      pollfd readable{fd, POLLIN, 0};
      int wait = static_cast<int>(std::min<long long>(left.count() + 1, kIdleSeconds * 1000LL));
      int ready = ::poll(&readable, 1, wait);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return Read::failed;  // silence: past the idle timeout or the deadline
    }
    ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
    else if (r == 0) return Read::end;
    else if (errno == EINTR) continue;
    else return Read::failed;  // a reset, or silence past the idle timeout
  }
  return Read::all;
}

// A payload of `n` bytes (already taken of the budget) into a buffer of exactly that size, by the
// deadline kPayloadSeconds after its header.
Read read_payload(int fd, uint32_t n, std::string& out) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kPayloadSeconds);
  out.resize(n);
  size_t got = 0;
  Read how = n ? read_full(fd, &out[0], n, got, &deadline) : Read::all;
  if (how != Read::all) out.clear();
  return how;
}

bool write_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t w = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (w > 0) sent += static_cast<size_t>(w);
    else if (w < 0 && errno == EINTR) continue;
    else return false;
  }
  return true;
}

// After a refusal that ends the connection: its reply sent, what the peer still sends is read and
// dropped for a moment (at most 1 s, 16 MiB) before the close, as HTTP servers linger. Closed with
// bytes unread, the socket would be reset, and a peer still writing could lose the reply.
void linger_close(int fd, const std::string& reply) {
  if (!write_all(fd, reply)) return;
  ::shutdown(fd, SHUT_WR);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  static thread_local char sink[1 << 16];
  for (size_t dropped = 0; dropped < (16u << 20);) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd readable{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&readable, 1, static_cast<int>(left.count())) <= 0) return;
    ssize_t r = ::recv(fd, sink, sizeof sink, 0);
    if (r <= 0) return;  // the peer's end, or an error: nothing more to wait for
    dropped += static_cast<size_t>(r);
  }
}

// One connection's frames, one after another, until it ends or goes out of step.
void serve(int fd, Service& service, Budget& budget) {
  std::string payload;
  Held held(budget);  // this connection's request payload and reply, until sent
  for (;;) {
    char head_bytes[tagless::kHeaderSize];
    size_t got = 0;
    Read how = read_full(fd, head_bytes, sizeof head_bytes, got);
    if (got == 0 || (how == Read::failed && got < sizeof head_bytes)) return;  // an end between frames, or silence
    Header head;
    if (!head.decode(head_bytes, got)) {
      linger_close(fd, error_reply(Header(), Status::BAD_FRAME,
                                "the stream ended inside a frame's header (" + std::to_string(got) + " bytes)"));
      return;
    }
    if (head.status || head.trailer_length) {
      linger_close(fd, error_reply(Header(), Status::BAD_FRAME, "a request frame has status 0 and no trailer"));
      return;
    }
    if (head.payload_length > service.max_body()) {
      linger_close(fd, error_reply(Header(), Status::TOO_LARGE,
                                "a payload of " + std::to_string(head.payload_length) + " bytes is past the limit of " +
                                    std::to_string(service.max_body())));
      return;
    }
    if (!held.take(head.payload_length)) {  // no room in time: answered, and the stream left behind
      linger_close(fd, error_reply(Header(), Status::BUSY, kBusy));
      return;
    }
    how = read_payload(fd, head.payload_length, payload);
    if (how == Read::failed) return;  // a reset, or silence or a trickle past its time: closed without a reply
    if (how == Read::end) {
      held.give_all();
      linger_close(fd, error_reply(Header(), Status::BAD_FRAME, "the stream ended inside a frame"));
      return;
    }
    bool busy = false;
    std::string reply = service.call(head, payload, held, busy);  // the reply's bytes are held from here
    if (payload.capacity() > (1 << 20)) std::string().swap(payload);  // a large one is not kept idle
    held.give(head.payload_length);  // the request's bytes, once its reply is built
    if (busy) {
      held.give_all();
      linger_close(fd, reply);
      return;
    }
    bool sent = write_all(fd, reply);
    std::string().swap(reply);
    held.give_all();  // the reply's bytes, once sent (or failed)
    if (!sent) return;
  }
}

// The open connections: counted against the limit, and shut down together when the server stops.
class Connections {
 public:
  bool add(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || open_.size() >= static_cast<size_t>(kMaxConnections)) return false;
    open_.insert(fd);
    return true;
  }
  void remove(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.erase(fd);
    ::close(fd);
    if (open_.empty()) none_.notify_all();
  }
  // Ends every connection's reads and writes; waits a moment for their threads to finish.
  void stop() {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    none_.wait_for(lock, std::chrono::seconds(2), [&] { return open_.empty(); });
  }

 private:
  std::mutex mutex_;
  std::condition_variable none_;
  std::set<int> open_;
  bool stopping_ = false;
};

void accept_one(int listener, Service& service, Budget& budget, Connections& connections) {
  int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);  // blocking, unlike the listener
  if (fd < 0) {  // none waiting after all (the peer gave up: EAGAIN, ECONNABORTED), or out of descriptors
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EINTR)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // EMFILE and kin: no busy loop meanwhile
    return;
  }
  if (!connections.add(fd)) {
    ::close(fd);  // past the limit: closed at once
    return;
  }
  int one = 1;
  timeval idle{kIdleSeconds, 0};
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof idle);
  try {
    std::thread([fd, &service, &budget, &connections] {
      try {
        serve(fd, service, budget);
      } catch (const std::exception& exc) {
        std::fprintf(stderr, "[tagless-cpp] ERROR a connection failed: %s\n", exc.what());
      }
      connections.remove(fd);
    }).detach();
  } catch (const std::system_error&) {  // no thread to be had: the connection is refused
    connections.remove(fd);
  }
}

// A listening socket on ADDR:PORT (IPv4 or IPv6), or -1 with errno's reason in `why`.
int listen_on(const std::string& bind, long port, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(bind.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc) {
    why = ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    // non-blocking: a connection reset between poll and accept must not block the main loop
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) < 0 || ::listen(fd, 128) < 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "error: %s (fix: tagless-server-cpp --port N [--bind ADDR] [--max-body-mb M] [--parent PID])\n",
               problem.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string bind = "127.0.0.1";
  long port = -1, parent = 0;
  double max_body_mb = 256.0;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    std::string value = argv[++i];
    char* end = nullptr;
    if (flag == "--bind") bind = value;
    else if (flag == "--port") port = std::strtol(value.c_str(), &end, 10);
    else if (flag == "--parent") parent = std::strtol(value.c_str(), &end, 10);
    else if (flag == "--max-body-mb") max_body_mb = std::strtod(value.c_str(), &end);
    else usage("unknown option " + flag);
    if (end && (*end || value.empty())) usage(flag + " " + value + ": not a number");
  }
  if (port < 0 || port > 65535) usage("--port must be 0-65535");
  if (!(max_body_mb > 0) || max_body_mb * kMib > UINT32_MAX) usage("--max-body-mb must be in (0, 4096)");
  uint64_t max_body = static_cast<uint64_t>(max_body_mb * kMib);  // contracts/limits.py Limits.from_mb
  if (!max_body) usage("--max-body-mb must allow at least one byte");

  // signals are taken by the main thread alone, through a signalfd; every thread started later inherits the mask
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  int signals = ::signalfd(-1, &stop_signals, SFD_CLOEXEC);
  ::signal(SIGPIPE, SIG_IGN);

  std::string why;
  int listener = listen_on(bind, port, why);
  if (listener < 0 || signals < 0) {
    std::fprintf(stderr, "error: cannot listen on %s:%ld: %s (fix: choose a free --port)\n", bind.c_str(), port,
                 signals < 0 ? std::strerror(errno) : why.c_str());
    return 1;
  }
  // shared with detached connection threads: never destroyed, so none outlives what it uses
  Service* service;
  try {
    service = new Service(max_body);
  } catch (const std::exception& exc) {
    std::fprintf(stderr, "error: %s (fix: TESTBED_CPU_LOCK must name a writable file)\n", exc.what());
    return 1;
  }
  Budget* budget = new Budget(max_body);
  Connections* connections = new Connections();
  std::fprintf(stderr, "[tagless-cpp] INFO tagless %s on %s:%d\n", tagless::kService, bind.c_str(), bound_port(listener));
  std::fflush(stderr);

  pollfd watch[2] = {{listener, POLLIN, 0}, {signals, POLLIN, 0}};
  for (;;) {
    int ready = ::poll(watch, 2, 1000);
    if (parent && getppid() != parent) break;
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    if (watch[1].revents) break;  // SIGTERM or SIGINT
    if (watch[0].revents & POLLIN) accept_one(listener, *service, *budget, *connections);
  }
  ::close(listener);
  connections->stop();
  return 0;
}
