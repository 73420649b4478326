# frozen_string_literal: true

# The offload service of contracts/offload.proto in Ruby: Debian's ruby-grpc, google-protobuf's
# messages (generated into build/ by protoc and grpc_ruby_plugin), and Ruby's own `matrix` library
# (a bundled gem of the interpreter) for the matrices.
#
# It answers `offload.v1.Offload/Execute` as the Python service does (server/grpc_service.py), and as
# server/cpp, server/go and server/java do: the same ops (mul, inv, log), dtypes (float64, int32,
# int64), limits (--max-body-mb, contracts/limits.py), refusals and their status codes
# (server/refusals.py), one request at a time, and the decode, compute and encode stages' wall and
# process CPU times in the `server-timing` trailing metadata. The method takes the request's raw bytes
# (a pass-through message class), so parsing them is the decode stage and is timed, as in Python. Each
# timed stage holds the host's CPU lock when TESTBED_CPU_LOCK names one (contracts/cpu_lock.py).
#
# `matrix` computes in Ruby objects: float64 entries are Floats; integer entries are Integers, exact
# and unbounded, so an integer product is cut to 64 or 32 bits afterwards (NumPy's wrap-around).
#
#   ruby offload_server.rb --port N [--bind ADDR] [--max-body-mb M] [--parent PID]
#
# It stops on SIGTERM or SIGINT, or when PID is no longer its parent.

$LOAD_PATH.unshift(File.join(__dir__, 'build'))
require 'matrix'
require 'offload_services_pb'
require_relative 'images'

module OffloadServer
  MAX_OPERANDS = 16 # contracts/wire.py MAX_OPERANDS
  MAX_RESULT_ELEMENTS = 1 << 28 # contracts/ops.py MAX_RESULT_ELEMENTS
  INT_MUL_WEIGHT = 32 # contracts/ops.py INT_MUL_WEIGHT
  INV_WEIGHT = 2 # contracts/ops.py INV_WEIGHT
  MIB = 1 << 20
  FIX = 'offload-server-ruby --max-body-mb'
  USAGE = 'offload-server-ruby --port N [--bind ADDR] [--max-body-mb M] [--parent PID]'
  DTYPES = %w[float64 int32 int64].freeze
  ARITY = { 'mul' => 2, 'inv' => 1, 'log' => 1 }.freeze
  Codes = GRPC::Core::StatusCodes

  # A refused request: its gRPC code and message ("error: detail"), as server/refusals.py pairs them.
  class Refused < StandardError
    attr_reader :code

    def initialize(code, error, detail = '')
      super(detail.empty? ? error : "#{error}: #{detail}")
      @code = code
    end
  end

  def self.bad_input(error, detail = '') = Refused.new(Codes::INVALID_ARGUMENT, error, detail)
  def self.over_limit(error, detail) = Refused.new(Codes::RESOURCE_EXHAUSTED, error, detail)
  def self.shape_text(rows, cols) = "#{rows}x#{cols}"

  # One decoded operand: its dtype, shape and entries as a ::Matrix (Floats, or Integers).
  Operand = Struct.new(:dtype, :rows, :cols, :matrix)

  # contracts/protobuf_codec.py matrix_array: a Matrix message whose fields describe exactly one matrix.
  def self.operand_of(msg, what)
    dtype = msg.dtype.empty? ? 'float64' : msg.dtype
    raise bad_input('bad dtype', "'#{dtype}'; allowed: float64, int32, int64") unless DTYPES.include?(dtype)

    rows, cols = msg.rows, msg.cols
    if rows < 1 || cols < 1
      raise bad_input('bad shape', "#{what}: #{shape_text(rows, cols)}; need positive rows and cols")
    end

    float = dtype == 'float64'
    entries, other = float ? [msg.values, msg.ints] : [msg.ints, msg.values]
    field, other_field = float ? %w[values ints] : %w[ints values]
    raise bad_input('malformed body', "#{what}: #{dtype} entries go in #{field}, not #{other_field}") if other.size.positive?

    if entries.size != rows * cols
      raise bad_input('entry count mismatch',
                      "#{what} has #{entries.size} entries in #{field}; #{shape_text(rows, cols)} needs #{rows * cols}")
    end
    flat = entries.to_a
    if dtype == 'int32' && flat.any? { |v| v < -(1 << 31) || v >= (1 << 31) }
      raise bad_input('integer out of range', "#{what}: entries must fit int32")
    end

    Operand.new(dtype, rows, cols, ::Matrix.rows(flat.each_slice(cols).to_a, false))
  end

  def self.megabytes(bytes) = (bytes / MIB.to_f).ceil

  # contracts/limits.py check_request: the request's cost against the limits, before computing.
  def self.check_request(op, ops, max_body)
    return if ops.size != ARITY[op] # the compute stage refuses it

    dtype = ops[0].dtype
    operand_bytes = ops.sum { |a| a.rows * a.cols * (dtype == 'int32' ? 4 : 8) }
    rows, cols = ops[0].rows, ops[0].cols
    work = rows.to_f * cols
    float_result = true
    case op
    when 'mul'
      cols = ops[1].cols
      work = ops[0].rows.to_f * ops[0].cols * ops[1].cols
      unless dtype == 'float64'
        work *= INT_MUL_WEIGHT
        float_result = false
      end
    when 'inv'
      work = rows.to_f * rows * cols * INV_WEIGHT
    end
    # protobuf's bound: 8 bytes per double, at most 10 per zigzag varint, plus tags and lengths
    response_bytes = rows.to_f * cols * (float_result ? 8 : 10) + 64
    what = "#{op} of #{ops.map { |a| shape_text(a.rows, a.cols) }.join(',')} #{dtype}"
    max_work = (max_body / 16.0)**1.5
    if operand_bytes > max_body
      raise over_limit('operands too large',
                       "#{what}: the operands take #{operand_bytes} bytes decoded; the server holds at most " \
                       "#{max_body} (#{FIX} #{megabytes(operand_bytes)} or more)")
    end
    if response_bytes > max_body
      raise over_limit('result too large',
                       "#{what}: the protobuf response can take #{response_bytes.to_i} bytes; the server sends at " \
                       "most #{max_body} (#{FIX} #{megabytes(response_bytes)} or more)")
    end
    return unless work > max_work

    raise over_limit('too much work',
                     format('%s: %.3g multiply-adds; the server runs at most %.3g per request (%s %d or more)',
                            what, work, max_work, FIX, megabytes(16 * work**(2.0 / 3.0))))
  end

  # An integer product cut to `bits` bits, two's complement: NumPy's wrap-around.
  def self.wrap(value, bits)
    half = 1 << (bits - 1)
    ((value + half) & ((1 << bits) - 1)) - half
  end

  def self.as_float(operand) = operand.dtype == 'float64' ? operand.matrix : operand.matrix.map(&:to_f)

  # The op's own checks, then the op; the result's dtype and ::Matrix.
  def self.compute(op, a, b)
    case op
    when 'mul'
      if a.cols != b.rows
        raise bad_input('shape mismatch',
                        "mul needs A's columns == B's rows, got #{shape_text(a.rows, a.cols)} @ #{shape_text(b.rows, b.cols)}")
      end
      if a.rows * b.cols > MAX_RESULT_ELEMENTS
        raise bad_input('result too large', "#{shape_text(a.rows, b.cols)} is over #{MAX_RESULT_ELEMENTS} elements")
      end

      product = a.matrix * b.matrix
      return [a.dtype, product] if a.dtype == 'float64'

      bits = a.dtype == 'int32' ? 32 : 64
      [a.dtype, product.map { |v| wrap(v, bits) }]
    when 'inv'
      raise bad_input('not square', "inv needs a square matrix, got #{shape_text(a.rows, a.cols)}") if a.rows != a.cols

      m = as_float(a)
      if a.dtype == 'float64' && !m.all?(&:finite?)
        raise bad_input('non-finite entries', "inv needs finite entries (LAPACK's result is undefined otherwise)")
      end

      begin # Gauss-Jordan with partial pivoting: singular when a pivot is exactly zero, as LAPACK's getrf
        ['float64', m.inverse]
      rescue ExceptionForMatrix::ErrNotRegular
        raise bad_input('singular matrix', 'inv: Singular matrix')
      end
    else # log
      m = as_float(a)
      # NaN fails this too
      raise bad_input('log needs positive entries', 'every entry must be > 0 (and not NaN)') unless m.all?(&:positive?)

      ['float64', m.map { |v| Math.log(v) }]
    end
  end

  # contracts/ops.py execute: the arity, one shared dtype, then the op.
  def self.execute(op, ops)
    raise bad_input('wrong number of operands', "#{op} takes #{ARITY[op]}, got #{ops.size}") if ops.size != ARITY[op]

    if ops.any? { |a| a.dtype != ops[0].dtype }
      raise bad_input('bad dtype', "operands must share one dtype of float64, int32, int64; got #{ops.map(&:dtype).join(', ')}")
    end

    compute(op, ops[0], ops[1])
  end

  def self.encode_reply(dtype, result)
    flat = result.to_a.flatten
    matrix = Offload::V1::Matrix.new(rows: result.row_count, cols: result.column_count, dtype: dtype)
    (dtype == 'float64' ? matrix.values : matrix.ints).replace(flat)
    Offload::V1::OpReply.encode(Offload::V1::OpReply.new(result: matrix))
  end

  # contracts/cpu_lock.py: one timed CPU stage at a time on a host (flock on the file TESTBED_CPU_LOCK names).
  class CpuLock
    def initialize(path)
      @file = path.nil? || path.empty? ? nil : File.open(path, File::RDWR | File::CREAT, 0o644)
    end

    def active? = !@file.nil?

    def hold
      @file&.flock(File::LOCK_EX)
      yield
    ensure
      @file&.flock(File::LOCK_UN)
    end
  end

  def self.now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  def self.cpu_seconds = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)

  # server/timing.py StageClock: each stage's wall and CPU milliseconds, in the order the stages ran.
  class StageClock
    def initialize(lock)
      @lock = lock
      @stages = []
      @waited = 0.0
    end

    def empty? = @stages.empty?

    def stage(name)
      asked = OffloadServer.now
      @lock.hold do # waiting for it counts in no stage
        start = OffloadServer.now
        @waited += start - asked
        cpu = OffloadServer.cpu_seconds
        begin
          yield
        ensure # a stage that failed still took time, and still counts
          @stages << format('%s;dur=%.3f;cpu=%.3f', name, (OffloadServer.now - start) * 1000,
                            (OffloadServer.cpu_seconds - cpu) * 1000)
        end
      end
    end

    # contracts/stages.py format_server_timing, and `cpulock` (the waits, which communication excludes)
    def header
      out = @stages.join(', ')
      @lock.active? ? out + format(', cpulock;dur=%.3f', @waited * 1000) : out
    end
  end

  # One Execute call: server/stages.py run_stages over the request's raw bytes.
  def self.run_stages(body, clock, max_body)
    op = nil
    ops = []
    image = nil
    clock.stage('decode') do
      begin
        msg = Offload::V1::OpRequest.decode(body)
      rescue Google::Protobuf::ParseError => e
        raise bad_input('malformed protobuf', "request is not an OpRequest: #{e.message}")
      end
      if Images::ALL_OPS.include?(msg.op) # an image op (images.rb): its image decoded in this stage
        image = Images.decode_request(msg, max_body)
        next
      end
      count = msg.operands.size
      raise over_limit('too many operands', "#{count} operands; at most #{MAX_OPERANDS}") if count > MAX_OPERANDS

      msg.operands.each_with_index { |m, k| ops << operand_of(m, "operand #{k}") }
      op = msg.op
      raise Refused.new(Codes::UNIMPLEMENTED, 'unknown operation', "'#{op}'; known: mul, inv, log, gray") unless ARITY.key?(op)
    end
    return Images.finish(image, clock) if image
    check_request(op, ops, max_body) unless ops.empty?
    dtype, result = clock.stage('compute') { execute(op, ops) }
    ops.clear
    clock.stage('encode') { encode_reply(dtype, result) }
  end

  # The request's bytes as they came, and the reply's as they go: decoding is a timed stage.
  class Raw
    attr_reader :bytes

    def initialize(bytes)
      @bytes = bytes
    end

    def self.decode(bytes) = bytes
    def self.encode(raw) = raw.bytes
  end

  # offload.v1.Offload, its name from the generated service, its one method over raw bytes.
  class Service
    include GRPC::GenericService

    self.marshal_class_method = :encode
    self.unmarshal_class_method = :decode
    self.service_name = Offload::V1::Offload::Service.service_name

    rpc :Execute, Raw, Raw

    def initialize(lock, max_body)
      super()
      @lock = lock
      @max_body = max_body
      @one_at_a_time = Mutex.new # trials never share a CPU
    end

    def execute(body, call)
      @one_at_a_time.synchronize { answer(body, call) }
    end

    def answer(body, call)
      clock = StageClock.new(@lock)
      begin
        out = OffloadServer.run_stages(body, clock, @max_body)
        call.output_metadata['server-timing'] = clock.header unless clock.empty?
        return Raw.new(out)
      rescue Refused => e
        code, message = e.code, e.message
      rescue StandardError, NoMemoryError, SystemStackError => e # a bug: logged, answered, the server goes on
        warn "[grpc-ruby] ERROR Execute failed: #{e.class}: #{e.message}"
        code, message = Codes::INTERNAL, "internal error: #{e.class}: #{e.message}"
      end
      trailers = clock.empty? ? {} : { 'server-timing' => clock.header }
      raise GRPC::BadStatus.new_status_exception(code, message, trailers)
    end
  end

  def self.usage(problem)
    warn "error: #{problem} (fix: #{USAGE})"
    exit 2
  end

  def self.parse(argv)
    options = { bind: '127.0.0.1', port: -1, parent: 0, max_body_mb: 256.0 }
    flags = { '--bind' => :bind, '--port' => :port, '--parent' => :parent, '--max-body-mb' => :max_body_mb }
    until argv.empty?
      flag = argv.shift
      usage("unknown option #{flag}") unless flags.key?(flag)
      usage("#{flag} needs a value") if argv.empty?
      value = argv.shift
      key = flags[flag]
      options[key] = case key
                     when :bind then value
                     when :max_body_mb then Float(value, exception: false)
                     else Integer(value, 10, exception: false)
                     end
      usage("#{flag} #{value}: not a number") if options[key].nil?
    end
    usage('--port must be 0-65535') unless (0..65_535).cover?(options[:port])
    unless options[:max_body_mb].positive? && options[:max_body_mb] * MIB <= (1 << 31) - 1
      usage('--max-body-mb must be in (0, 2048)')
    end
    options
  end

  def self.main(argv)
    options = parse(argv.dup)
    max_body = (options[:max_body_mb] * MIB).to_i
    begin
      lock = CpuLock.new(ENV.fetch('TESTBED_CPU_LOCK', nil))
    rescue SystemCallError => e
      warn "error: cannot open the CPU lock: #{e.message} (fix: unset TESTBED_CPU_LOCK or make its folder)"
      exit 2
    end
    # gRPC's own receive limit refuses a larger body (RESOURCE_EXHAUSTED) before the handler runs
    server = GRPC::RpcServer.new(
      pool_size: 16, max_waiting_requests: 64,
      server_args: { 'grpc.max_receive_message_length' => max_body, 'grpc.max_send_message_length' => -1 }
    )
    host = options[:bind].include?(':') ? "[#{options[:bind]}]" : options[:bind]
    begin
      bound = server.add_http2_port("#{host}:#{options[:port]}", :this_port_is_insecure)
    rescue RuntimeError => e
      bound = 0
      problem = e.message
    end
    if bound.zero?
      warn "error: cannot listen on #{host}:#{options[:port]} for gRPC#{problem && ": #{problem}"} (fix: choose a free --port)"
      exit 1
    end
    server.handle(Service.new(lock, max_body))
    serving = Thread.new { server.run }
    server.wait_till_running(30)
    warn "[grpc-ruby] INFO gRPC #{Service.service_name} on #{options[:bind]}:#{bound}"
    $stderr.flush
    stop = false
    %w[TERM INT].each { |sig| Signal.trap(sig) { stop = true } }
    sleep 1 until stop || (options[:parent].positive? && Process.ppid != options[:parent])
    server.stop
    serving.join(2)
  end
end

OffloadServer.main(ARGV) if $PROGRAM_NAME == __FILE__
