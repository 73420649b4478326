// The offload service of contracts/offload.proto in C++: gRPC's C++ library and Eigen for the matrices.
//
// It answers `offload.v1.Offload/Execute` as the Python service does (server/grpc_service.py): the
// same ops (mul, inv, log), dtypes (float64, int32, int64), limits (--max-body-mb, contracts/limits.py),
// refusals and their status codes (server/refusals.py), one request at a time, and the decode, compute
// and encode stages' wall and process CPU times in the `server-timing` trailing metadata. The request
// arrives as raw bytes (a raw callback method), so parsing it is the decode stage and is timed, as in
// Python. Each timed stage holds the host's CPU lock when TESTBED_CPU_LOCK names one (contracts/cpu_lock.py).
//
//   offload-server-cpp --port N [--bind ADDR] [--max-body-mb M] [--parent PID]
//
// It stops on SIGTERM or SIGINT, or when PID is no longer its parent.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <Eigen/Dense>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include "images.h"
#include "offload.grpc.pb.h"
#include "offload.pb.h"

namespace {

using offload::v1::Matrix;
using offload::v1::OpReply;
using offload::v1::OpRequest;

constexpr int kMaxOperands = 16;                    // contracts/wire.py MAX_OPERANDS
constexpr int64_t kMaxResultElements = 1LL << 28;   // contracts/ops.py MAX_RESULT_ELEMENTS
constexpr double kIntMulWeight = 32;                // contracts/ops.py INT_MUL_WEIGHT
constexpr double kInvWeight = 2;                    // contracts/ops.py INV_WEIGHT
constexpr double kMib = 1 << 20;
const char* const kFix = "offload-server-cpp --max-body-mb";

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A refused request: its gRPC code and message ("error: detail"), as server/refusals.py pairs them.
struct Refused : std::runtime_error {
  grpc::StatusCode code;
  Refused(grpc::StatusCode c, const std::string& error, const std::string& detail)
      : std::runtime_error(detail.empty() ? error : error + ": " + detail), code(c) {}
};

Refused bad_input(const std::string& error, const std::string& detail = "") {
  return Refused(grpc::StatusCode::INVALID_ARGUMENT, error, detail);
}
Refused over_limit(const std::string& error, const std::string& detail) {
  return Refused(grpc::StatusCode::RESOURCE_EXHAUSTED, error, detail);
}

enum class Dtype { float64, int32, int64 };

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::float64: return "float64";
    case Dtype::int32: return "int32";
    default: return "int64";
  }
}

int itemsize(Dtype d) { return d == Dtype::int32 ? 4 : 8; }

// One decoded operand: float64 entries in `f`, integer ones (int32 or int64) in `i`, row-major.
struct Operand {
  Dtype dtype;
  int64_t rows, cols;
  std::vector<double> f;
  std::vector<int64_t> i;
};

std::string shape_text(int64_t r, int64_t c) { return std::to_string(r) + "x" + std::to_string(c); }

// contracts/protobuf_codec.py matrix_array: a Matrix message whose fields describe exactly one matrix.
Operand operand_of(const Matrix& m, const std::string& what) {
  Operand a;
  const std::string& name = m.dtype().empty() ? std::string("float64") : m.dtype();
  if (name == "float64") a.dtype = Dtype::float64;
  else if (name == "int32") a.dtype = Dtype::int32;
  else if (name == "int64") a.dtype = Dtype::int64;
  else throw bad_input("bad dtype", "'" + name + "'; allowed: float64, int32, int64");
  a.rows = m.rows();
  a.cols = m.cols();
  if (a.rows < 1 || a.cols < 1)
    throw bad_input("bad shape", what + ": " + shape_text(a.rows, a.cols) + "; need positive rows and cols");
  bool is_float = a.dtype == Dtype::float64;
  int64_t count = is_float ? m.values_size() : m.ints_size();
  int64_t other = is_float ? m.ints_size() : m.values_size();
  const char* field = is_float ? "values" : "ints";
  if (other)
    throw bad_input("malformed body", what + ": " + dtype_name(a.dtype) + " entries go in " + field + ", not " +
                                          (is_float ? "ints" : "values"));
  uint64_t needed = static_cast<uint64_t>(a.rows) * static_cast<uint64_t>(a.cols);  // 2 x 32 bits: no overflow
  if (static_cast<uint64_t>(count) != needed)
    throw bad_input("entry count mismatch", what + " has " + std::to_string(count) + " entries in " + field +
                                                "; " + shape_text(a.rows, a.cols) + " needs " + std::to_string(needed));
  if (is_float) {
    a.f.assign(m.values().begin(), m.values().end());
  } else {
    a.i.assign(m.ints().begin(), m.ints().end());
    if (a.dtype == Dtype::int32)
      for (int64_t v : a.i)
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
          throw bad_input("integer out of range", what + ": entries must fit int32");
  }
  return a;
}

// contracts/limits.py: what a request will cost, checked after decoding and before computing.
struct Limits {
  int64_t max_body;
  double max_work() const { return std::pow(max_body / 16.0, 1.5); }
};

std::string mb(double bytes) { return std::to_string(static_cast<int64_t>(std::ceil(bytes / kMib))); }

int arity(const std::string& op) { return op == "mul" ? 2 : 1; }

void check_request(const std::string& op, const std::vector<Operand>& ops, const Limits& limits) {
  if (static_cast<int>(ops.size()) != arity(op)) return;  // the compute stage refuses it
  Dtype dtype = ops[0].dtype;
  int64_t operand_bytes = 0;
  std::string shapes;
  for (const Operand& a : ops) {
    operand_bytes += a.rows * a.cols * itemsize(dtype);
    shapes += (shapes.empty() ? "" : ",") + shape_text(a.rows, a.cols);
  }
  int64_t rows = ops[0].rows, cols = ops[0].cols;
  double work = static_cast<double>(rows) * cols;
  bool float_result = true;
  if (op == "mul") {
    cols = ops[1].cols;
    work = static_cast<double>(ops[0].rows) * ops[0].cols * ops[1].cols * (dtype == Dtype::float64 ? 1 : kIntMulWeight);
    float_result = dtype == Dtype::float64;
  } else if (op == "inv") {
    work = static_cast<double>(rows) * rows * cols * kInvWeight;
  }
  // protobuf's bound: 8 bytes per double, at most 10 per zigzag varint, plus tags and lengths
  double response_bytes = static_cast<double>(rows) * cols * (float_result ? 8 : 10) + 64;
  std::string what = op + " of " + shapes + " " + dtype_name(dtype);
  if (operand_bytes > limits.max_body)
    throw over_limit("operands too large", what + ": the operands take " + std::to_string(operand_bytes) +
                                               " bytes decoded; the server holds at most " +
                                               std::to_string(limits.max_body) + " (" + kFix + " " +
                                               mb(operand_bytes) + " or more)");
  if (response_bytes > limits.max_body)
    throw over_limit("result too large", what + ": the protobuf response can take " +
                                             std::to_string(static_cast<int64_t>(response_bytes)) +
                                             " bytes; the server sends at most " + std::to_string(limits.max_body) +
                                             " (" + kFix + " " + mb(response_bytes) + " or more)");
  if (work > limits.max_work()) {
    std::ostringstream msg;
    msg.precision(3);
    msg << what << ": " << work << " multiply-adds; the server runs at most " << limits.max_work()
        << " per request (" << kFix << " " << mb(16 * std::pow(work, 2.0 / 3.0)) << " or more)";
    throw over_limit("too much work", msg.str());
  }
}

// The result of an op: float64 entries, or integers of the operands' dtype (mul of integers).
struct Result {
  Dtype dtype;
  int64_t rows, cols;
  RowMatrix<double> f;
  RowMatrix<int64_t> i;
};

template <typename U>
RowMatrix<int64_t> wrapping_product(const Operand& a, const Operand& b) {
  // unsigned arithmetic wraps around by definition; the two's complement result is NumPy's
  Eigen::Map<const RowMatrix<int64_t>> A(a.i.data(), a.rows, a.cols), B(b.i.data(), b.rows, b.cols);
  RowMatrix<U> product = A.cast<U>() * B.cast<U>();
  using S = std::make_signed_t<U>;
  return product.unaryExpr([](U v) { return static_cast<S>(v); }).template cast<int64_t>();
}

RowMatrix<double> as_double(const Operand& a) {
  if (a.dtype == Dtype::float64) return Eigen::Map<const RowMatrix<double>>(a.f.data(), a.rows, a.cols);
  return Eigen::Map<const RowMatrix<int64_t>>(a.i.data(), a.rows, a.cols).cast<double>();
}

// contracts/ops.py execute: the arity, one shared dtype, the op's own checks, then the op.
Result execute(const std::string& op, const std::vector<Operand>& ops) {
  if (static_cast<int>(ops.size()) != arity(op))
    throw bad_input("wrong number of operands",
                    op + " takes " + std::to_string(arity(op)) + ", got " + std::to_string(ops.size()));
  for (const Operand& a : ops)
    if (a.dtype != ops[0].dtype) {
      std::string got;
      for (const Operand& b : ops) got += std::string(got.empty() ? "" : ", ") + dtype_name(b.dtype);
      throw bad_input("bad dtype", "operands must share one dtype of float64, int32, int64; got " + got);
    }
  const Operand& a = ops[0];
  Result r{Dtype::float64, a.rows, a.cols, {}, {}};
  if (op == "mul") {
    const Operand& b = ops[1];
    if (a.cols != b.rows)
      throw bad_input("shape mismatch", "mul needs A's columns == B's rows, got " + shape_text(a.rows, a.cols) +
                                            " @ " + shape_text(b.rows, b.cols));
    if (a.rows * b.cols > kMaxResultElements)
      throw bad_input("result too large",
                      shape_text(a.rows, b.cols) + " is over " + std::to_string(kMaxResultElements) + " elements");
    r.dtype = a.dtype;
    r.cols = b.cols;
    if (a.dtype == Dtype::float64)
      r.f = Eigen::Map<const RowMatrix<double>>(a.f.data(), a.rows, a.cols) *
            Eigen::Map<const RowMatrix<double>>(b.f.data(), b.rows, b.cols);
    else if (a.dtype == Dtype::int32)
      r.i = wrapping_product<uint32_t>(a, b);
    else
      r.i = wrapping_product<uint64_t>(a, b);
  } else if (op == "inv") {
    if (a.rows != a.cols)
      throw bad_input("not square", "inv needs a square matrix, got " + shape_text(a.rows, a.cols));
    RowMatrix<double> m = as_double(a);
    if (a.dtype == Dtype::float64 && !m.allFinite())
      throw bad_input("non-finite entries", "inv needs finite entries (LAPACK's result is undefined otherwise)");
    Eigen::PartialPivLU<RowMatrix<double>> lu(m);
    // LAPACK's getrf, NumPy's test: singular when a pivot of U is exactly zero
    if ((lu.matrixLU().diagonal().array() == 0.0).any()) throw bad_input("singular matrix", "inv: Singular matrix");
    r.f = lu.inverse();
  } else {  // log
    RowMatrix<double> m = as_double(a);
    if (!(m.array() > 0.0).all())  // NaN fails this too
      throw bad_input("log needs positive entries", "every entry must be > 0 (and not NaN)");
    r.f = m.array().log().matrix();
  }
  return r;
}

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
  bool active() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// server/timing.py StageClock: each stage's wall and CPU milliseconds, in the order the stages ran.
class StageClock {
 public:
  explicit StageClock(const CpuLock& lock) : lock_(lock) {}

  template <typename F>
  auto stage(const std::string& name, F&& body) -> decltype(body()) {
    auto asked = std::chrono::steady_clock::now();
    std::lock_guard<const CpuLock> held(lock_);  // waiting for it counts in no stage
    auto start = std::chrono::steady_clock::now();
    waited_ms_ += std::chrono::duration<double, std::milli>(start - asked).count();
    double cpu = cpu_seconds();
    struct Record {  // a stage that failed still took time, and still counts
      StageClock* clock;
      const std::string& name;
      std::chrono::steady_clock::time_point start;
      double cpu;
      ~Record() {
        clock->stages_.push_back(
            {name, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
             (cpu_seconds() - cpu) * 1000.0});
      }
    } record{this, name, start, cpu};
    return body();
  }

  bool empty() const { return stages_.empty(); }

  // contracts/stages.py format_server_timing: `decode;dur=1.500;cpu=1.410, compute;dur=...`
  std::string header() const {
    std::string out;
    char buf[128];
    for (const auto& s : stages_) {
      std::snprintf(buf, sizeof buf, "%s%s;dur=%.3f;cpu=%.3f", out.empty() ? "" : ", ", s.name.c_str(), s.ms,
                    s.cpu_ms);
      out += buf;
    }
    if (lock_.active()) {  // the waits for the CPU lock, which communication excludes (contracts/stages.py)
      std::snprintf(buf, sizeof buf, ", cpulock;dur=%.3f", waited_ms_);
      out += buf;
    }
    return out;
  }

 private:
  struct Stage {
    std::string name;
    double ms, cpu_ms;
  };
  const CpuLock& lock_;
  std::vector<Stage> stages_;
  double waited_ms_ = 0.0;
};

void fill(Matrix* m, const Result& r) {
  m->set_rows(static_cast<uint32_t>(r.rows));
  m->set_cols(static_cast<uint32_t>(r.cols));
  m->set_dtype(dtype_name(r.dtype));
  if (r.dtype == Dtype::float64) {
    m->mutable_values()->Add(r.f.data(), r.f.data() + r.f.size());
  } else {
    m->mutable_ints()->Add(r.i.data(), r.i.data() + r.i.size());
  }
}

const std::map<std::string, int> kOps = {{"mul", 2}, {"inv", 1}, {"log", 1}};

// An image op (server/image_stages.py): decode the image (its header checked first), filter, encode.
std::string run_image_stages(OpRequest& msg, StageClock& clock, const Limits& limits, const std::string& op) {
  cv::Mat img;
  std::string format;
  clock.stage("decode", [&] {
    if (msg.operands_size()) throw bad_input("malformed body", "'" + op + "' is an image op: send images, not operands");
    if (msg.images_size() != 1)
      throw bad_input("wrong number of images",
                      "the request carries " + std::to_string(msg.images_size()) + " images; an image op takes 1");
    const std::string& data = msg.images(0).data();
    images::Header h = images::read_header(data);
    if (!h.ok) {
      auto colon = h.problem.find(": ");
      throw bad_input(h.problem.substr(0, colon), h.problem.substr(colon + 2));
    }
    format = h.format;
    int64_t decoded = h.rows * h.cols * 3;
    if (h.rows < 1 || h.cols < 1) throw bad_input("corrupt image", std::to_string(h.cols) + "x" + std::to_string(h.rows) + " pixels");
    if (decoded > limits.max_body)
      throw over_limit("image too large", "a " + std::to_string(h.cols) + "x" + std::to_string(h.rows) + " " + format +
                                              " decodes to " + std::to_string(decoded) + " bytes; the server holds at most " +
                                              std::to_string(limits.max_body) + " (" + kFix + " " + mb(decoded) + " or more)");
    cv::Mat raw(1, static_cast<int>(data.size()), CV_8UC1, const_cast<char*>(data.data()));
    try {
      img = cv::imdecode(raw, cv::IMREAD_COLOR);
    } catch (const cv::Exception&) {
      img = cv::Mat();
    }
    if (img.empty() || img.rows != h.rows || img.cols != h.cols)
      throw bad_input("corrupt image", "the " + format + " does not decode");
    msg.Clear();
  });
  std::vector<cv::Mat> outputs = clock.stage("compute", [&] {
    std::vector<cv::Mat> out;
    for (const std::string& name : images::filters_of(op)) out.push_back(images::filter(name, img));
    return out;
  });
  img.release();
  return clock.stage("encode", [&] {
    OpReply reply;
    for (const cv::Mat& o : outputs) {
      auto* image = reply.add_images();
      image->set_format(format);
      image->set_data(images::encode(o, format));
    }
    return reply.SerializeAsString();
  });
}

const std::map<std::string, int> kImageOps = {{"gray", 1}, {"bilateral", 1}, {"cartoon", 1}, {"filters3", 3}};

// One Execute call: server/stages.py run_stages over raw bytes.
std::string run_stages(const grpc::ByteBuffer& request, StageClock& clock, const Limits& limits) {
  std::string op;
  std::vector<Operand> ops;
  OpRequest msg;
  bool image = false;
  clock.stage("decode", [&] {
    std::vector<grpc::Slice> slices;
    request.Dump(&slices);
    std::string body;
    body.reserve(request.Length());
    for (const auto& s : slices) body.append(reinterpret_cast<const char*>(s.begin()), s.size());
    if (!msg.ParseFromString(body)) throw bad_input("malformed protobuf", "request is not an OpRequest");
    body = std::string();  // no longer needed once parsed
    op = msg.op();
    image = kImageOps.count(op) > 0;
    if (image) return;  // the image's own decode follows, in this stage's time (run_image_stages)
    if (msg.operands_size() > kMaxOperands)
      throw over_limit("too many operands", std::to_string(msg.operands_size()) + " operands; at most " +
                                                std::to_string(kMaxOperands));
    for (int i = 0; i < msg.operands_size(); ++i)
      ops.push_back(operand_of(msg.operands(i), "operand " + std::to_string(i)));
    if (!kOps.count(op))
      throw Refused(grpc::StatusCode::UNIMPLEMENTED, "unknown operation",
                    "'" + op + "'; known: mul, inv, log, gray, bilateral, cartoon, filters3");
  });
  if (image) return run_image_stages(msg, clock, limits, op);
  if (!ops.empty()) check_request(op, ops, limits);
  Result result = clock.stage("compute", [&] { return execute(op, ops); });
  ops.clear();
  return clock.stage("encode", [&] {
    OpReply reply;
    fill(reply.mutable_result(), result);
    return reply.SerializeAsString();
  });
}

class OffloadService final : public offload::v1::Offload::WithRawCallbackMethod_Execute<offload::v1::Offload::Service> {
 public:
  explicit OffloadService(Limits limits) : limits_(limits) {}

  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override {
    grpc::Status status;
    {
      std::lock_guard<std::mutex> one_at_a_time(mutex_);  // trials never share a CPU
      StageClock clock(cpu_lock_);
      try {
        std::string out = run_stages(*request, clock, limits_);
        grpc::Slice slice(out);
        *response = grpc::ByteBuffer(&slice, 1);
      } catch (const Refused& exc) {
        status = grpc::Status(exc.code, exc.what());
      } catch (const std::exception& exc) {  // a bug: logged, answered, and the server goes on
        std::fprintf(stderr, "[grpc-cpp] ERROR Execute failed: %s\n", exc.what());
        status = grpc::Status(grpc::StatusCode::INTERNAL, std::string("internal error: ") + exc.what());
      }
      if (!clock.empty()) context->AddTrailingMetadata("server-timing", clock.header());
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  const CpuLock& cpu_lock() const { return cpu_lock_; }
  std::mutex& mutex() { return mutex_; }

 private:
  Limits limits_;
  CpuLock cpu_lock_;
  std::mutex mutex_;
};

// The lightweight-RPC study's service `rpcstudy.v1.Study` (contracts/rpc_study.tagless, as
// contracts/rpc_study_proto.py numbers its fields), answered as server/rpc_study_grpc.py answers it.
//
// How, and why not protoc's classes: protoc's C++ output for the LargeData messages (fields 1..8192,
// one int32 each) is ~30 MB, and with Debian's protobuf 3.21 headers `g++ -O2` of it did not finish in
// 5 minutes (nor compile at all without -ftemplate-depth: InternalSwap's memswap recursion). So the
// Study methods are served by gRPC's generic callback service (raw request bytes, like Execute's raw
// method), and each message is read and written field by field with protobuf's own wire-format API
// (io::CodedInputStream / io::CodedOutputStream and internal::WireFormatLite: tag, varint, packed,
// length-delimited), which is what the generated parsers and serializers do: the same library, the
// same wire format (proto3: zero values omitted, `repeated` packed and read packed or not, unknown
// fields skipped, a string checked as UTF-8, a message that does not parse refused). What it leaves
// out is building a generated message object per call; it keeps no unknown fields in an echo.
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using WFL = google::protobuf::internal::WireFormatLite;

const char* const kStudyPrefix = "/rpcstudy.v1.Study/";
constexpr int32_t kRandMax = std::numeric_limits<int32_t>::max();  // server/rpc_study_ops.py RAND_MAX

enum class StudyMethod { say_hello, average, get_rand_nums, large_data };

struct StudyCall {
  StudyMethod method;
  int fields;  // LargeDataK: K
};

const std::map<std::string, StudyCall> kStudyMethods = {
    {"SayHello", {StudyMethod::say_hello, 1}},
    {"Average", {StudyMethod::average, 1}},
    {"GetRandNums", {StudyMethod::get_rand_nums, 1}},
    {"SendRcvLargeData128", {StudyMethod::large_data, 128}},
    {"SendRcvLargeData256", {StudyMethod::large_data, 256}},
    {"SendRcvLargeData512", {StudyMethod::large_data, 512}},
    {"SendRcvLargeData1024", {StudyMethod::large_data, 1024}},
    {"SendRcvLargeData2048", {StudyMethod::large_data, 2048}},
    {"SendRcvLargeData4096", {StudyMethod::large_data, 4096}},
    {"SendRcvLargeData8192", {StudyMethod::large_data, 8192}},
};

// A study request's fields: `text` (Hello.name), `ints` (Numbers.values, Count.n, LargeDataK.m1..mK).
struct StudyRequest {
  std::string text;
  std::vector<int32_t> ints;
};

Refused unparsable(const std::string& name, const std::string& why) {
  return bad_input(name + ": the request does not parse", why);
}

// One message's fields off the wire, as protobuf's generated parser takes them.
StudyRequest parse_study(const std::string& name, const StudyCall& call, const std::string& body) {
  StudyRequest req;
  if (call.method == StudyMethod::large_data || call.method == StudyMethod::get_rand_nums)
    req.ints.assign(call.fields, 0);
  CodedInputStream in(reinterpret_cast<const uint8_t*>(body.data()), static_cast<int>(body.size()));
  while (uint32_t tag = in.ReadTag()) {
    int field = WFL::GetTagFieldNumber(tag);
    WFL::WireType type = WFL::GetTagWireType(tag);
    bool ok = true, known = true;
    if (call.method == StudyMethod::say_hello && field == 1 && type == WFL::WIRETYPE_LENGTH_DELIMITED) {
      ok = WFL::ReadString(&in, &req.text) &&
           WFL::VerifyUtf8String(req.text.data(), static_cast<int>(req.text.size()), WFL::PARSE,
                                 "rpcstudy.v1.Hello.name");
    } else if (call.method == StudyMethod::average && field == 1 && type == WFL::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length;  // packed: proto3's way
      ok = in.ReadVarint32(&length) && length <= body.size() - static_cast<size_t>(in.CurrentPosition());
      if (ok) {
        CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
        while (ok && in.BytesUntilLimit() > 0) {
          int32_t v;
          ok = WFL::ReadPrimitive<int32_t, WFL::TYPE_INT32>(&in, &v);
          req.ints.push_back(v);
        }
        ok = ok && in.BytesUntilLimit() == 0;
        in.PopLimit(limit);
      }
    } else if (call.method == StudyMethod::average && field == 1 && type == WFL::WIRETYPE_VARINT) {
      int32_t v;  // not packed: a parser accepts either
      ok = WFL::ReadPrimitive<int32_t, WFL::TYPE_INT32>(&in, &v);
      req.ints.push_back(v);
    } else if (call.method != StudyMethod::say_hello && call.method != StudyMethod::average && field >= 1 &&
               field <= call.fields && type == WFL::WIRETYPE_VARINT) {
      ok = WFL::ReadPrimitive<int32_t, WFL::TYPE_INT32>(&in, &req.ints[field - 1]);
    } else {
      known = false;
    }
    if (!known) ok = WFL::SkipField(&in, tag);  // an unknown field (or one of another wire type)
    if (!ok) throw unparsable(name, "a field of number " + std::to_string(field) + " does not parse");
  }
  if (!in.ConsumedEntireMessage()) throw unparsable(name, "a bad tag or a truncated message");
  return req;
}

// The reply's bytes, as a generated serializer writes them (fields in order, zero values omitted).
std::string serialize_study(const StudyCall& call, const std::string& text, const std::vector<int32_t>& ints,
                            double mean) {
  std::string out;
  {
    StringOutputStream stream(&out);
    CodedOutputStream os(&stream);
    if (call.method == StudyMethod::say_hello) {
      if (!text.empty()) WFL::WriteString(1, text, &os);
    } else if (call.method == StudyMethod::average) {
      if (mean != 0.0 || std::signbit(mean)) WFL::WriteDouble(1, mean, &os);
    } else if (call.method == StudyMethod::get_rand_nums) {
      if (!ints.empty()) {
        size_t size = 0;
        for (int32_t v : ints) size += WFL::Int32Size(v);
        WFL::WriteTag(1, WFL::WIRETYPE_LENGTH_DELIMITED, &os);
        os.WriteVarint32(static_cast<uint32_t>(size));
        for (int32_t v : ints) WFL::WriteInt32NoTag(v, &os);
      }
    } else {
      for (size_t i = 0; i < ints.size(); ++i)
        if (ints[i] != 0) WFL::WriteInt32(static_cast<int>(i + 1), ints[i], &os);
    }
  }
  return out;
}

constexpr size_t kMaxName = 1 << 20;  // SayHello's name, bytes (server/rpc_study_ops.py: MAX_NAME)

// One study call: decode (parse), compute (the reply's values), encode (serialize), each timed.
std::string run_study(const std::string& name, const StudyCall& call, const grpc::ByteBuffer& request,
                      StageClock& clock, const Limits& limits, std::mt19937_64& rng) {
  if (call.method == StudyMethod::say_hello && request.Length() > kMaxName + 8)  // its tag and length, the name
    throw over_limit("SayHello: a name past " + std::to_string(kMaxName) + " bytes", "");
  StudyRequest req = clock.stage("decode", [&] {
    std::vector<grpc::Slice> slices;
    request.Dump(&slices);
    std::string body;
    body.reserve(request.Length());
    for (const auto& s : slices) body.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return parse_study(name, call, body);
  });
  std::string text;
  std::vector<int32_t> ints;
  double mean = 0.0;
  clock.stage("compute", [&] {
    if (call.method == StudyMethod::say_hello) {
      text = "Hello " + req.text;
    } else if (call.method == StudyMethod::average) {
      double sum = 0.0;  // exact: int32 values, far fewer than 2^22 of them under any body limit
      for (int32_t v : req.ints) sum += v;
      mean = req.ints.empty() ? 0.0 : sum / static_cast<double>(req.ints.size());
    } else if (call.method == StudyMethod::get_rand_nums) {
      int32_t n = req.ints[0];
      if (n < 0) throw bad_input("GetRandNums: a count of " + std::to_string(n));
      if (5 * static_cast<int64_t>(n) + 10 > limits.max_body)  // a varint's 5 bytes a value, its tag and length
        throw over_limit("GetRandNums: " + std::to_string(n) + " values pass the reply limit of " +
                             std::to_string(limits.max_body) + " bytes",
                         "");
      std::uniform_int_distribution<int32_t> uniform(0, kRandMax);
      ints.resize(n);
      for (int32_t& v : ints) v = uniform(rng);
    } else {
      ints = std::move(req.ints);  // SendRcvLargeDataK: the message echoed
    }
  });
  return clock.stage("encode", [&] { return serialize_study(call, text, ints, mean); });
}

// rpcstudy.v1.Study's methods, and UNIMPLEMENTED for any other method no service registered.
class StudyService final : public grpc::CallbackGenericService {
 public:
  StudyService(Limits limits, const CpuLock& cpu_lock, std::mutex& mutex)
      : limits_(limits), cpu_lock_(cpu_lock), mutex_(mutex), rng_(std::random_device{}()) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    return new Reactor(this, context);
  }

 private:
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    Reactor(StudyService* service, grpc::GenericCallbackServerContext* context)
        : service_(service), context_(context) {
      const std::string& path = context->method();
      auto found = path.rfind(kStudyPrefix, 0) == 0 ? kStudyMethods.find(path.substr(std::strlen(kStudyPrefix)))
                                                    : kStudyMethods.end();
      if (found == kStudyMethods.end()) {
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no method " + path));
        return;
      }
      name_ = found->first;
      call_ = found->second;
      StartRead(&request_);
    }

    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, name_ + ": no request message"));
        return;
      }
      grpc::Status status = service_->answer(name_, call_, request_, context_, &response_);
      if (status.ok())
        StartWriteAndFinish(&response_, grpc::WriteOptions(), status);
      else
        Finish(status);
    }

    void OnDone() override { delete this; }

   private:
    StudyService* service_;
    grpc::GenericCallbackServerContext* context_;
    std::string name_;
    StudyCall call_{};
    grpc::ByteBuffer request_, response_;
  };

  grpc::Status answer(const std::string& name, const StudyCall& call, const grpc::ByteBuffer& request,
                      grpc::GenericCallbackServerContext* context, grpc::ByteBuffer* response) {
    grpc::Status status;
    std::lock_guard<std::mutex> one_at_a_time(mutex_);  // shared with Execute: trials never share a CPU
    StageClock clock(cpu_lock_);
    try {
      std::string out = run_study(name, call, request, clock, limits_, rng_);
      grpc::Slice slice(out);
      *response = grpc::ByteBuffer(&slice, 1);
    } catch (const Refused& exc) {
      status = grpc::Status(exc.code, exc.what());
    } catch (const std::exception& exc) {  // a bug: logged, answered, and the server goes on
      std::fprintf(stderr, "[grpc-cpp] ERROR %s failed: %s\n", name.c_str(), exc.what());
      status = grpc::Status(grpc::StatusCode::INTERNAL, std::string("internal error: ") + exc.what());
    }
    if (!clock.empty()) context->AddTrailingMetadata("server-timing", clock.header());
    return status;
  }

  Limits limits_;
  const CpuLock& cpu_lock_;
  std::mutex& mutex_;
  std::mt19937_64 rng_;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "error: %s (fix: offload-server-cpp --port N [--bind ADDR] [--max-body-mb M] [--parent PID])\n",
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
    if (end && *end) usage(flag + " " + value + ": not a number");
  }
  if (port < 0 || port > 65535) usage("--port must be 0-65535");
  if (!(max_body_mb > 0) || max_body_mb * kMib > std::numeric_limits<int>::max()) usage("--max-body-mb must be in (0, 2048)");
  Limits limits{static_cast<int64_t>(max_body_mb * kMib)};

  // signals are taken by the main thread alone (sigtimedwait below), never by gRPC's threads
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  OffloadService service(limits);
  grpc::ServerBuilder builder;
  std::string host = bind.find(':') != std::string::npos ? "[" + bind + "]" : bind;
  int bound = 0;
  builder.AddListeningPort(host + ":" + std::to_string(port), grpc::InsecureServerCredentials(), &bound);
  builder.SetMaxReceiveMessageSize(static_cast<int>(limits.max_body));
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(&service);
  StudyService study(limits, service.cpu_lock(), service.mutex());  // rpcstudy.v1.Study, beside Execute
  builder.RegisterCallbackGenericService(&study);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || !bound) {
    std::fprintf(stderr, "error: cannot listen on %s:%ld for gRPC (fix: choose a free --port)\n", host.c_str(), port);
    return 1;
  }
  std::fprintf(stderr, "[grpc-cpp] INFO gRPC offload.v1.Offload and rpcstudy.v1.Study on %s:%d\n", bind.c_str(), bound);
  std::fflush(stderr);
  timespec second{1, 0};
  while (sigtimedwait(&stop_signals, nullptr, &second) < 0) {
    if (parent && getppid() != parent) break;
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
