// The offload service of contracts/offload.proto in Java: gRPC-Java (Netty transport), protobuf-java's
// messages, and Apache Commons Math 3 for the float64 matrices (as the multi-language study did).
//
// It answers `offload.v1.Offload/Execute` as the Python service does (server/grpc_service.py), and as
// server/cpp and server/go do: the same ops (mul, inv, log), dtypes (float64, int32, int64), limits
// (--max-body-mb, contracts/limits.py), refusals and their status codes (server/refusals.py), one
// request at a time, and the decode, compute and encode stages' wall and process CPU times in the
// `server-timing` trailing metadata. The method takes the request's raw bytes (a pass-through
// marshaller), so parsing them is the decode stage and is timed, as in Python. Each timed stage holds
// the host's CPU lock when TESTBED_CPU_LOCK names one (contracts/cpu_lock.py): flock(2) through JNA,
// since Java's own FileLock is an fcntl lock, which a flock never meets. The process CPU time is
// clock_gettime(CLOCK_PROCESS_CPUTIME_ID) through JNA too (the JDK's own figure counts in 10 ms ticks).
//
// One difference the transport imposes: gRPC-Java's Netty transport answers a message over its own
// receive limit by resetting the stream (the client sees CANCELLED), not with a status. So its limit is
// twice --max-body-mb, and a body between the two is refused here, RESOURCE_EXHAUSTED and "Received
// message larger than max (N vs. M)" as gRPC's C core words it (Python, C++, Ruby); a body over twice
// the limit is reset unread.
//
// Commons Math has no integer matrices: int32 and int64 products are plain loops over Java's long,
// which wraps around as NumPy's integers do (int32 then cut to 32 bits).
//
//   java -jar offload-server-java.jar --port N [--bind ADDR] [--max-body-mb M] [--parent PID]
//
// It stops on SIGTERM or SIGINT, or when PID is no longer its parent.
package offload.server;

import com.google.protobuf.InvalidProtocolBufferException;
import com.sun.jna.LastErrorException;
import com.sun.jna.Library;
import com.sun.jna.Native;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.netty.NettyServerBuilder;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import offload.v1.OffloadGrpc;
import offload.v1.OffloadOuterClass.Matrix;
import offload.v1.OffloadOuterClass.OpReply;
import offload.v1.OffloadOuterClass.OpRequest;
import org.apache.commons.math3.linear.DecompositionSolver;
import org.apache.commons.math3.linear.LUDecomposition;
import org.apache.commons.math3.linear.MatrixUtils;
import org.apache.commons.math3.linear.RealMatrix;

public final class OffloadServer {
  static final int MAX_OPERANDS = 16; // contracts/wire.py MAX_OPERANDS
  static final long MAX_RESULT_ELEMENTS = 1L << 28; // contracts/ops.py MAX_RESULT_ELEMENTS
  static final double INT_MUL_WEIGHT = 32; // contracts/ops.py INT_MUL_WEIGHT
  static final double INV_WEIGHT = 2; // contracts/ops.py INV_WEIGHT
  static final double MIB = 1 << 20;
  static final String FIX = "offload-server-java --max-body-mb";
  static final String USAGE = "offload-server-java --port N [--bind ADDR] [--max-body-mb M] [--parent PID]";
  static final Metadata.Key<String> SERVER_TIMING =
      Metadata.Key.of("server-timing", Metadata.ASCII_STRING_MARSHALLER);

  private OffloadServer() {}

  // A refused request: its gRPC code and message ("error: detail"), as server/refusals.py pairs them.
  static final class Refused extends Exception {
    private static final long serialVersionUID = 1L;
    final Status.Code code;

    Refused(Status.Code code, String error, String detail) {
      super(detail.isEmpty() ? error : error + ": " + detail, null, false, false);
      this.code = code;
    }
  }

  static Refused badInput(String error, String detail) {
    return new Refused(Status.Code.INVALID_ARGUMENT, error, detail);
  }

  static Refused overLimit(String error, String detail) {
    return new Refused(Status.Code.RESOURCE_EXHAUSTED, error, detail);
  }

  static String shapeText(long r, long c) {
    return r + "x" + c;
  }

  static int itemsize(String dtype) {
    return dtype.equals("int32") ? 4 : 8;
  }

  // One decoded operand: float64 entries in f (rows of a double[][], as Commons Math takes them),
  // integer ones (int32 or int64) in i, row-major.
  static final class Operand {
    String dtype;
    long rows, cols;
    double[][] f;
    long[] i;

    double[][] asDouble() {
      if (f != null) return f;
      double[][] out = new double[(int) rows][(int) cols];
      for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) out[r][c] = i[(int) (r * cols + c)];
      }
      return out;
    }
  }

  // contracts/protobuf_codec.py matrix_array: a Matrix message whose fields describe exactly one matrix.
  static Operand operandOf(Matrix m, String what) throws Refused {
    Operand a = new Operand();
    a.dtype = m.getDtype().isEmpty() ? "float64" : m.getDtype();
    if (!a.dtype.equals("float64") && !a.dtype.equals("int32") && !a.dtype.equals("int64")) {
      throw badInput("bad dtype", "'" + a.dtype + "'; allowed: float64, int32, int64");
    }
    a.rows = Integer.toUnsignedLong(m.getRows());
    a.cols = Integer.toUnsignedLong(m.getCols());
    if (a.rows < 1 || a.cols < 1) {
      throw badInput("bad shape", what + ": " + shapeText(a.rows, a.cols) + "; need positive rows and cols");
    }
    boolean isFloat = a.dtype.equals("float64");
    long count = isFloat ? m.getValuesCount() : m.getIntsCount();
    long other = isFloat ? m.getIntsCount() : m.getValuesCount();
    String field = isFloat ? "values" : "ints";
    if (other > 0) {
      throw badInput(
          "malformed body",
          what + ": " + a.dtype + " entries go in " + field + ", not " + (isFloat ? "ints" : "values"));
    }
    long needed = a.rows * a.cols; // 2 x 32 bits: fits 64, unsigned (over 2^63 it cannot equal count)
    if (count != needed) {
      throw badInput(
          "entry count mismatch",
          what + " has " + count + " entries in " + field + "; " + shapeText(a.rows, a.cols) + " needs "
              + Long.toUnsignedString(needed));
    }
    int rows = (int) a.rows, cols = (int) a.cols; // count fits an int, so both do
    if (isFloat) {
      a.f = new double[rows][cols];
      for (int r = 0, k = 0; r < rows; r++) {
        double[] row = a.f[r];
        for (int c = 0; c < cols; c++) row[c] = m.getValues(k++);
      }
      return a;
    }
    a.i = new long[(int) count];
    for (int k = 0; k < count; k++) {
      long v = m.getInts(k);
      if (a.dtype.equals("int32") && (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE)) {
        throw badInput("integer out of range", what + ": entries must fit int32");
      }
      a.i[k] = v;
    }
    return a;
  }

  static int arity(String op) {
    return op.equals("mul") ? 2 : 1;
  }

  static String mb(double bytes) {
    return Long.toString((long) Math.ceil(bytes / MIB));
  }

  // C's %.3g, as the C++ and Go servers write a figure: 3 significant digits, no trailing zeros.
  static String g3(double x) {
    if (x == 0 || Double.isNaN(x) || Double.isInfinite(x)) return String.valueOf(x);
    String e = String.format(Locale.ROOT, "%.2e", x); // d.dde+XX
    int exp = Integer.parseInt(e.substring(e.indexOf('e') + 1));
    if (exp < -4 || exp >= 3) {
      String mantissa = e.substring(0, e.indexOf('e')).replaceAll("\\.?0+$", "");
      return String.format(Locale.ROOT, "%se%s%02d", mantissa, exp < 0 ? "-" : "+", Math.abs(exp));
    }
    String fixed = String.format(Locale.ROOT, "%." + Math.max(0, 2 - exp) + "f", x);
    return fixed.contains(".") ? fixed.replaceAll("\\.?0+$", "") : fixed;
  }

  // contracts/limits.py check_request: the request's cost against the limits, before computing.
  static void checkRequest(String op, List<Operand> ops, long maxBody) throws Refused {
    if (ops.size() != arity(op)) return; // the compute stage refuses it
    String dtype = ops.get(0).dtype;
    long operandBytes = 0;
    List<String> shapes = new ArrayList<>();
    for (Operand a : ops) {
      operandBytes += a.rows * a.cols * itemsize(dtype);
      shapes.add(shapeText(a.rows, a.cols));
    }
    long rows = ops.get(0).rows, cols = ops.get(0).cols;
    double work = (double) rows * cols;
    boolean floatResult = true;
    if (op.equals("mul")) {
      cols = ops.get(1).cols;
      work = (double) ops.get(0).rows * ops.get(0).cols * ops.get(1).cols;
      if (!dtype.equals("float64")) {
        work *= INT_MUL_WEIGHT;
        floatResult = false;
      }
    } else if (op.equals("inv")) {
      work = (double) rows * rows * cols * INV_WEIGHT;
    }
    // protobuf's bound: 8 bytes per double, at most 10 per zigzag varint, plus tags and lengths
    double responseBytes = (double) rows * cols * (floatResult ? 8 : 10) + 64;
    String what = op + " of " + String.join(",", shapes) + " " + dtype;
    double maxWork = Math.pow(maxBody / 16.0, 1.5);
    if (operandBytes > maxBody) {
      throw overLimit(
          "operands too large",
          what + ": the operands take " + operandBytes + " bytes decoded; the server holds at most " + maxBody
              + " (" + FIX + " " + mb(operandBytes) + " or more)");
    }
    if (responseBytes > maxBody) {
      throw overLimit(
          "result too large",
          what + ": the protobuf response can take " + (long) responseBytes + " bytes; the server sends at most "
              + maxBody + " (" + FIX + " " + mb(responseBytes) + " or more)");
    }
    if (work > maxWork) {
      throw overLimit(
          "too much work",
          what + ": " + g3(work) + " multiply-adds; the server runs at most " + g3(maxWork) + " per request ("
              + FIX + " " + mb(16 * Math.pow(work, 2.0 / 3.0)) + " or more)");
    }
  }

  // An op's result: float64 entries (rows of a double[][]), or integers of the operands' dtype (mul).
  static final class Result {
    String dtype = "float64";
    long rows, cols;
    double[][] f;
    long[] i;
  }

  // C = A @ B for integers, row by row in i-k-j order; Java's long wraps around, int32 is cut to 32 bits.
  static long[] mulInt(long[] a, long[] b, int m, int k, int n, boolean wrap32) {
    long[] c = new long[m * n];
    for (int i = 0; i < m; i++) {
      int ci = i * n;
      for (int p = 0; p < k; p++) {
        long x = a[i * k + p];
        int bp = p * n;
        for (int j = 0; j < n; j++) c[ci + j] += x * b[bp + j];
      }
    }
    if (wrap32) {
      for (int j = 0; j < c.length; j++) c[j] = (int) c[j];
    }
    return c;
  }

  // contracts/ops.py execute: the arity, one shared dtype, the op's own checks, then the op.
  static Result execute(String op, List<Operand> ops) throws Refused {
    if (ops.size() != arity(op)) {
      throw badInput("wrong number of operands", op + " takes " + arity(op) + ", got " + ops.size());
    }
    for (Operand a : ops) {
      if (!a.dtype.equals(ops.get(0).dtype)) {
        List<String> got = new ArrayList<>();
        for (Operand b : ops) got.add(b.dtype);
        throw badInput("bad dtype", "operands must share one dtype of float64, int32, int64; got " + String.join(", ", got));
      }
    }
    Operand a = ops.get(0);
    Result r = new Result();
    r.rows = a.rows;
    r.cols = a.cols;
    if (op.equals("mul")) {
      Operand b = ops.get(1);
      if (a.cols != b.rows) {
        throw badInput(
            "shape mismatch",
            "mul needs A's columns == B's rows, got " + shapeText(a.rows, a.cols) + " @ " + shapeText(b.rows, b.cols));
      }
      if (a.rows * b.cols > MAX_RESULT_ELEMENTS) {
        throw badInput("result too large", shapeText(a.rows, b.cols) + " is over " + MAX_RESULT_ELEMENTS + " elements");
      }
      r.dtype = a.dtype;
      r.cols = b.cols;
      if (a.dtype.equals("float64")) {
        r.f = MatrixUtils.createRealMatrix(a.f).multiply(MatrixUtils.createRealMatrix(b.f)).getData();
      } else {
        r.i = mulInt(a.i, b.i, (int) a.rows, (int) a.cols, (int) b.cols, a.dtype.equals("int32"));
      }
    } else if (op.equals("inv")) {
      if (a.rows != a.cols) {
        throw badInput("not square", "inv needs a square matrix, got " + shapeText(a.rows, a.cols));
      }
      double[][] m = a.asDouble();
      if (a.dtype.equals("float64")) {
        for (double[] row : m) {
          for (double v : row) {
            if (!Double.isFinite(v)) {
              throw badInput("non-finite entries", "inv needs finite entries (LAPACK's result is undefined otherwise)");
            }
          }
        }
      }
      // LAPACK's getrf, NumPy's test: singular when a pivot is exactly zero (below the smallest double)
      DecompositionSolver lu = new LUDecomposition(MatrixUtils.createRealMatrix(m), Double.MIN_VALUE).getSolver();
      if (!lu.isNonSingular()) throw badInput("singular matrix", "inv: Singular matrix");
      r.f = lu.getInverse().getData();
    } else { // log
      double[][] m = a.asDouble();
      r.f = new double[m.length][];
      for (int i = 0; i < m.length; i++) {
        double[] row = m[i], out = new double[row.length];
        for (int j = 0; j < row.length; j++) {
          if (!(row[j] > 0)) { // NaN fails this too
            throw badInput("log needs positive entries", "every entry must be > 0 (and not NaN)");
          }
          out[j] = Math.log(row[j]);
        }
        r.f[i] = out;
      }
    }
    return r;
  }

  static byte[] encodeReply(Result r) {
    Matrix.Builder m = Matrix.newBuilder().setRows((int) r.rows).setCols((int) r.cols).setDtype(r.dtype);
    if (r.f != null) {
      for (double[] row : r.f) {
        for (double v : row) m.addValues(v);
      }
    } else {
      for (long v : r.i) m.addInts(v);
    }
    return OpReply.newBuilder().setResult(m).build().toByteArray();
  }

  // libc through JNA: flock(2) for the CPU lock and the process's CPU clock.
  interface LibC extends Library {
    int open(String path, int flags, int mode) throws LastErrorException;

    int flock(int fd, int operation) throws LastErrorException;

    int clock_gettime(int clock, long[] timespec) throws LastErrorException;
  }

  static final LibC C = Native.load("c", LibC.class);
  static final int O_RDWR = 02, O_CREAT = 0100, O_CLOEXEC = 02000000, LOCK_EX = 2, LOCK_UN = 8, EINTR = 4;
  static final int CLOCK_PROCESS_CPUTIME_ID = 2;

  static double cpuSeconds() {
    long[] ts = new long[2];
    C.clock_gettime(CLOCK_PROCESS_CPUTIME_ID, ts);
    return ts[0] + ts[1] * 1e-9;
  }

  // contracts/cpu_lock.py: one timed CPU stage at a time on a host (flock on the file TESTBED_CPU_LOCK names).
  static final class CpuLock {
    final int fd;

    CpuLock(String path) {
      fd = path == null || path.isEmpty() ? -1 : C.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    }

    void lock() {
      while (fd >= 0) {
        try {
          C.flock(fd, LOCK_EX);
          return;
        } catch (LastErrorException exc) {
          if (exc.getErrorCode() != EINTR) throw exc;
        }
      }
    }

    void unlock() {
      if (fd >= 0) C.flock(fd, LOCK_UN);
    }
  }

  interface Body<T> {
    T run() throws Refused;
  }

  // server/timing.py StageClock: each stage's wall and CPU milliseconds, in the order the stages ran.
  static final class StageClock {
    final CpuLock lock;
    final List<String> stages = new ArrayList<>();
    double waitedMs;

    StageClock(CpuLock lock) {
      this.lock = lock;
    }

    <T> T stage(String name, Body<T> body) throws Refused {
      long asked = System.nanoTime();
      lock.lock(); // waiting for it counts in no stage
      try {
        long start = System.nanoTime();
        waitedMs += (start - asked) / 1e6;
        double cpu = cpuSeconds();
        try {
          return body.run();
        } finally { // a stage that failed still took time, and still counts
          double ms = (System.nanoTime() - start) / 1e6;
          stages.add(String.format(Locale.ROOT, "%s;dur=%.3f;cpu=%.3f", name, ms, (cpuSeconds() - cpu) * 1000));
        }
      } finally {
        lock.unlock();
      }
    }

    // contracts/stages.py format_server_timing, and `cpulock` (the waits, which communication excludes)
    String header() {
      String out = String.join(", ", stages);
      return lock.fd >= 0 ? out + String.format(Locale.ROOT, ", cpulock;dur=%.3f", waitedMs) : out;
    }
  }

  // One Execute call: server/stages.py run_stages over the request's raw bytes.
  static byte[] runStages(byte[] body, StageClock clock, long maxBody) throws Refused {
    List<Operand> ops = new ArrayList<>();
    Images.Decoded[] image = new Images.Decoded[1]; // an image op's image (Images.java)
    String op = clock.stage("decode", () -> {
      OpRequest msg;
      try {
        msg = OpRequest.parseFrom(body);
      } catch (InvalidProtocolBufferException exc) {
        throw badInput("malformed protobuf", "request is not an OpRequest: " + exc.getMessage());
      }
      if (Images.OPS.contains(msg.getOp())) {
        image[0] = Images.decode(msg, maxBody);
        return msg.getOp();
      }
      if (msg.getOperandsCount() > MAX_OPERANDS) {
        throw overLimit("too many operands", msg.getOperandsCount() + " operands; at most " + MAX_OPERANDS);
      }
      for (int k = 0; k < msg.getOperandsCount(); k++) ops.add(operandOf(msg.getOperands(k), "operand " + k));
      String name = msg.getOp();
      if (!name.equals("mul") && !name.equals("inv") && !name.equals("log")) {
        throw new Refused(Status.Code.UNIMPLEMENTED, "unknown operation", "'" + name + "'; known: mul, inv, log, gray, bilateral, cartoon, filters3");
      }
      return name;
    });
    if (image[0] != null) return Images.run(op, image[0], clock);
    if (!ops.isEmpty()) checkRequest(op, ops, maxBody);
    Result result = clock.stage("compute", () -> execute(op, ops));
    ops.clear();
    return clock.stage("encode", () -> encodeReply(result));
  }

  // The request's bytes as they came, and the reply's as they go: decoding is a timed stage.
  static final MethodDescriptor.Marshaller<byte[]> RAW =
      new MethodDescriptor.Marshaller<byte[]>() {
        @Override
        public InputStream stream(byte[] value) {
          return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream stream) {
          try {
            return stream.readAllBytes();
          } catch (IOException exc) {
            throw Status.INTERNAL.withDescription("cannot read the request: " + exc).asRuntimeException();
          }
        }
      };

  static final class Service {
    final CpuLock cpuLock;
    final long maxBody;

    Service(CpuLock cpuLock, long maxBody) {
      this.cpuLock = cpuLock;
      this.maxBody = maxBody;
    }

    // one request at a time: trials never share a CPU
    synchronized void answer(ServerCall<byte[], byte[]> call, byte[] body) {
      StageClock clock = new StageClock(cpuLock);
      Status status = Status.OK;
      byte[] out = null;
      try {
        out = runStages(body, clock, maxBody);
      } catch (Refused exc) {
        status = Status.fromCode(exc.code).withDescription(exc.getMessage());
      } catch (RuntimeException | OutOfMemoryError exc) { // a bug: logged, answered, and the server goes on
        System.err.println("[grpc-java] ERROR Execute failed: " + exc);
        status = Status.INTERNAL.withDescription("internal error: " + exc);
      }
      Metadata trailers = new Metadata();
      if (!clock.stages.isEmpty()) trailers.put(SERVER_TIMING, clock.header());
      if (out != null) {
        call.sendHeaders(new Metadata());
        call.sendMessage(out);
      }
      call.close(status, trailers);
    }
  }

  static ServerServiceDefinition definition(Service service) {
    MethodDescriptor<byte[], byte[]> execute =
        MethodDescriptor.<byte[], byte[]>newBuilder()
            .setType(MethodDescriptor.MethodType.UNARY)
            .setFullMethodName(OffloadGrpc.getExecuteMethod().getFullMethodName())
            .setRequestMarshaller(RAW)
            .setResponseMarshaller(RAW)
            .build();
    ServerCallHandler<byte[], byte[]> handler =
        (call, headers) -> {
          call.request(2); // a second message is a client's error, as gRPC's own unary handler says
          return new ServerCall.Listener<byte[]>() {
            byte[] body;
            boolean extra;

            @Override
            public void onMessage(byte[] message) {
              extra = body != null;
              body = message;
            }

            @Override
            public void onHalfClose() {
              if (body == null || extra) {
                String problem = body == null ? "Half-closed without a request" : "Too many requests";
                call.close(Status.INTERNAL.withDescription(problem), new Metadata());
                return;
              }
              byte[] request = body;
              body = null;
              if (request.length > service.maxBody) { // gRPC's own receive limit, as the C core words it
                String problem = "Received message larger than max (" + request.length + " vs. " + service.maxBody + ")";
                call.close(Status.RESOURCE_EXHAUSTED.withDescription(problem), new Metadata());
                return;
              }
              service.answer(call, request);
            }
          };
        };
    return ServerServiceDefinition.builder(OffloadGrpc.SERVICE_NAME).addMethod(execute, handler).build();
  }

  static void usage(String problem) {
    System.err.println("error: " + problem + " (fix: " + USAGE + ")");
    System.exit(2);
  }

  static long parentPid() {
    return ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
  }

  public static void main(String[] args) throws InterruptedException {
    String bind = "127.0.0.1";
    long port = -1, parent = 0;
    double maxBodyMb = 256.0;
    for (int i = 0; i < args.length; i++) {
      String flag = args[i];
      if (i + 1 >= args.length) usage(flag + " needs a value");
      String value = args[++i];
      try {
        switch (flag) {
          case "--bind" -> bind = value;
          case "--port" -> port = Long.parseLong(value);
          case "--parent" -> parent = Long.parseLong(value);
          case "--max-body-mb" -> maxBodyMb = Double.parseDouble(value);
          default -> usage("unknown option " + flag);
        }
      } catch (NumberFormatException exc) {
        usage(flag + " " + value + ": not a number");
      }
    }
    if (port < 0 || port > 65535) usage("--port must be 0-65535");
    if (!(maxBodyMb > 0) || maxBodyMb * MIB > Integer.MAX_VALUE) usage("--max-body-mb must be in (0, 2048)");
    long maxBody = (long) (maxBodyMb * MIB);
    CpuLock cpuLock = null;
    try {
      cpuLock = new CpuLock(System.getenv("TESTBED_CPU_LOCK"));
    } catch (LastErrorException exc) {
      System.err.println("error: cannot open the CPU lock: " + exc.getMessage()
          + " (fix: unset TESTBED_CPU_LOCK or make its folder)");
      System.exit(2);
    }

    ExecutorService calls = Executors.newSingleThreadExecutor(); // requests run one at a time anyway
    Server server =
        NettyServerBuilder.forAddress(new InetSocketAddress(bind, (int) port))
            .executor(calls)
            // over this the transport resets the stream; up to it, the handler refuses (see the top)
            .maxInboundMessageSize((int) Math.min(Integer.MAX_VALUE, 2 * maxBody))
            .addService(definition(new Service(cpuLock, maxBody)))
            .build();
    String host = bind.contains(":") ? "[" + bind + "]" : bind;
    try {
      server.start();
    } catch (IOException exc) {
      System.err.println("error: cannot listen on " + host + ":" + port + " for gRPC: " + exc.getMessage()
          + " (fix: choose a free --port)");
      System.exit(1);
    }
    System.err.println("[grpc-java] INFO gRPC " + OffloadGrpc.SERVICE_NAME + " on " + bind + ":" + server.getPort());
    Thread stopping = new Thread(() -> stop(server, calls)); // SIGTERM, SIGINT: the JVM's shutdown hooks
    Runtime.getRuntime().addShutdownHook(stopping);
    while (parent == 0 || parentPid() == parent) Thread.sleep(1000);
    System.exit(0); // the parent is gone: the hook stops the server
  }

  static void stop(Server server, ExecutorService calls) {
    server.shutdown();
    try {
      if (!server.awaitTermination(2, TimeUnit.SECONDS)) server.shutdownNow();
    } catch (InterruptedException exc) {
      server.shutdownNow();
    }
    calls.shutdownNow();
  }
}
