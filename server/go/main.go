// The offload service of contracts/offload.proto in Go: gRPC-Go, protobuf-go's wire format, and
// plain Go loops for the matrices (Debian packages no Go matrix library).
//
// It answers `offload.v1.Offload/Execute` as the Python service does (server/grpc_service.py): the
// same ops (mul, inv, log), dtypes (float64, int32, int64), limits (--max-body-mb, contracts/limits.py),
// refusals and their status codes (server/refusals.py), one request at a time, and the decode, compute
// and encode stages' wall and process CPU times in the `server-timing` trailing metadata. The handler
// gets the request's raw bytes (a pass-through codec), so parsing them is the decode stage and is timed,
// as in Python. Each timed stage holds the host's CPU lock when TESTBED_CPU_LOCK names one
// (contracts/cpu_lock.py).
//
//	offload-server-go --port N [--bind ADDR] [--max-body-mb M] [--parent PID]
//
// It stops on SIGTERM or SIGINT, or when PID is no longer its parent.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	maxOperands       = 16      // contracts/wire.py MAX_OPERANDS
	maxResultElements = 1 << 28 // contracts/ops.py MAX_RESULT_ELEMENTS
	intMulWeight      = 32      // contracts/ops.py INT_MUL_WEIGHT
	invWeight         = 2       // contracts/ops.py INV_WEIGHT
	mib               = 1 << 20
	fix               = "offload-server-go --max-body-mb"
)

// refused is a request the server will not run: its gRPC code and "error: detail" (server/refusals.py).
type refused struct {
	code    codes.Code
	message string
}

func (r *refused) Error() string { return r.message }

func refuse(code codes.Code, err, detail string) *refused {
	if detail == "" {
		return &refused{code, err}
	}
	return &refused{code, err + ": " + detail}
}

func badInput(err, detail string) *refused { return refuse(codes.InvalidArgument, err, detail) }

func overLimit(err, detail string) *refused { return refuse(codes.ResourceExhausted, err, detail) }

// operand is one decoded matrix: float64 entries in f, integer ones (int32 or int64) in i, row-major.
type operand struct {
	dtype      string
	rows, cols int64
	f          []float64
	i          []int64
}

func itemsize(dtype string) int64 {
	if dtype == "int32" {
		return 4
	}
	return 8
}

func shapeText(r, c int64) string { return fmt.Sprintf("%dx%d", r, c) }

// matrixMessage is a Matrix message's fields as they came off the wire.
type matrixMessage struct {
	rows, cols uint32
	dtype      string
	values     []float64
	ints       []int64
}

var errMalformed = fmt.Errorf("malformed")

// parseMatrix reads a Matrix message (contracts/offload.proto): scalars last one wins, repeated
// fields packed or not, unknown fields (and known ones of another wire type) skipped, as every
// protobuf runtime does.
func parseMatrix(b []byte) (m matrixMessage, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return m, errMalformed
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			if num == 1 {
				m.rows = uint32(v)
			} else {
				m.cols = uint32(v)
			}
		case num == 3 && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			if n >= 0 && !utf8.Valid(v) {
				return m, errMalformed
			}
			m.dtype = string(v)
		case num == 4 && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			if n >= 0 && len(v)%8 != 0 {
				return m, errMalformed
			}
			for ; len(v) > 0; v = v[8:] {
				x, _ := protowire.ConsumeFixed64(v)
				m.values = append(m.values, math.Float64frombits(x))
			}
		case num == 4 && typ == protowire.Fixed64Type:
			var x uint64
			x, n = protowire.ConsumeFixed64(b)
			m.values = append(m.values, math.Float64frombits(x))
		case num == 5 && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			for len(v) > 0 && n >= 0 {
				x, k := protowire.ConsumeVarint(v)
				if k < 0 {
					return m, errMalformed
				}
				m.ints = append(m.ints, protowire.DecodeZigZag(x))
				v = v[k:]
			}
		case num == 5 && typ == protowire.VarintType:
			var x uint64
			x, n = protowire.ConsumeVarint(b)
			m.ints = append(m.ints, protowire.DecodeZigZag(x))
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return m, errMalformed
		}
		b = b[n:]
	}
	return m, nil
}

// parseRequest reads an OpRequest: the op's name and the operands' messages.
func parseRequest(b []byte) (op string, matrices [][]byte, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", nil, errMalformed
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			if num == 1 {
				if n >= 0 && !utf8.Valid(v) {
					return "", nil, errMalformed
				}
				op = string(v)
			} else {
				matrices = append(matrices, v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return "", nil, errMalformed
		}
		b = b[n:]
	}
	return op, matrices, nil
}

// operandOf is contracts/protobuf_codec.py matrix_array: a Matrix whose fields describe exactly one matrix.
func operandOf(m matrixMessage, what string) (operand, error) {
	a := operand{dtype: m.dtype, rows: int64(m.rows), cols: int64(m.cols)}
	if a.dtype == "" {
		a.dtype = "float64"
	}
	if a.dtype != "float64" && a.dtype != "int32" && a.dtype != "int64" {
		return a, badInput("bad dtype", fmt.Sprintf("'%s'; allowed: float64, int32, int64", a.dtype))
	}
	if a.rows < 1 || a.cols < 1 {
		return a, badInput("bad shape", fmt.Sprintf("%s: %s; need positive rows and cols", what, shapeText(a.rows, a.cols)))
	}
	isFloat := a.dtype == "float64"
	count, other, field, otherField := len(m.ints), len(m.values), "ints", "values"
	if isFloat {
		count, other, field, otherField = len(m.values), len(m.ints), "values", "ints"
	}
	if other > 0 {
		return a, badInput("malformed body", fmt.Sprintf("%s: %s entries go in %s, not %s", what, a.dtype, field, otherField))
	}
	if needed := uint64(m.rows) * uint64(m.cols); uint64(count) != needed { // 2 x 32 bits: no overflow
		return a, badInput("entry count mismatch", fmt.Sprintf("%s has %d entries in %s; %s needs %d",
			what, count, field, shapeText(a.rows, a.cols), needed))
	}
	if isFloat {
		a.f = m.values
		return a, nil
	}
	a.i = m.ints
	if a.dtype == "int32" {
		for _, v := range a.i {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return a, badInput("integer out of range", what+": entries must fit int32")
			}
		}
	}
	return a, nil
}

var arity = map[string]int{"mul": 2, "inv": 1, "log": 1}

// checkRequest is contracts/limits.py check_request: the request's cost against the limits, before computing.
func checkRequest(op string, ops []operand, maxBody int64) error {
	if len(ops) != arity[op] {
		return nil // the compute stage refuses it
	}
	dtype := ops[0].dtype
	var operandBytes int64
	shapes := make([]string, len(ops))
	for k, a := range ops {
		operandBytes += a.rows * a.cols * itemsize(dtype)
		shapes[k] = shapeText(a.rows, a.cols)
	}
	rows, cols := ops[0].rows, ops[0].cols
	work := float64(rows) * float64(cols)
	floatResult := true
	switch op {
	case "mul":
		cols = ops[1].cols
		work = float64(ops[0].rows) * float64(ops[0].cols) * float64(ops[1].cols)
		if dtype != "float64" {
			work *= intMulWeight
			floatResult = false
		}
	case "inv":
		work = float64(rows) * float64(rows) * float64(cols) * invWeight
	}
	per := 8.0 // protobuf: 8 bytes per double, at most 10 per zigzag varint, plus tags and lengths
	if !floatResult {
		per = 10
	}
	responseBytes := float64(rows)*float64(cols)*per + 64
	what := fmt.Sprintf("%s of %s %s", op, strings.Join(shapes, ","), dtype)
	mb := func(bytes float64) int64 { return int64(math.Ceil(bytes / mib)) }
	maxWork := math.Pow(float64(maxBody)/16, 1.5)
	switch {
	case operandBytes > maxBody:
		return overLimit("operands too large", fmt.Sprintf("%s: the operands take %d bytes decoded; the server holds at most %d (%s %d or more)",
			what, operandBytes, maxBody, fix, mb(float64(operandBytes))))
	case responseBytes > float64(maxBody):
		return overLimit("result too large", fmt.Sprintf("%s: the protobuf response can take %.0f bytes; the server sends at most %d (%s %d or more)",
			what, responseBytes, maxBody, fix, mb(responseBytes)))
	case work > maxWork:
		return overLimit("too much work", fmt.Sprintf("%s: %.3g multiply-adds; the server runs at most %.3g per request (%s %d or more)",
			what, work, maxWork, fix, mb(16*math.Pow(work, 2.0/3.0))))
	}
	return nil
}

// result is an op's result: float64 entries, or integers of the operands' dtype (mul of integers).
type result struct {
	dtype      string
	rows, cols int64
	f          []float64
	i          []int64
}

func asFloat(a operand) []float64 {
	if a.dtype == "float64" {
		return a.f
	}
	out := make([]float64, len(a.i))
	for k, v := range a.i {
		out[k] = float64(v)
	}
	return out
}

// mulFloat is C = A @ B, row by row in i-k-j order (each inner loop runs along a row of B and of C).
func mulFloat(a, b []float64, m, k, n int64) []float64 {
	c := make([]float64, m*n)
	for i := int64(0); i < m; i++ {
		ci := c[i*n : (i+1)*n]
		for p := int64(0); p < k; p++ {
			x, bp := a[i*k+p], b[p*n:(p+1)*n]
			for j := range ci {
				ci[j] += x * bp[j]
			}
		}
	}
	return c
}

// mulInt is mulFloat for integers; int32 products wrap around in 32 bits, as NumPy's do.
func mulInt(a, b []int64, m, k, n int64, wrap32 bool) []int64 {
	c := make([]int64, m*n)
	for i := int64(0); i < m; i++ {
		ci := c[i*n : (i+1)*n]
		for p := int64(0); p < k; p++ {
			x, bp := a[i*k+p], b[p*n:(p+1)*n]
			for j := range ci {
				ci[j] += x * bp[j] // Go's signed integers wrap around
			}
		}
	}
	if wrap32 {
		for j, v := range c {
			c[j] = int64(int32(v))
		}
	}
	return c
}

// invert is A^-1 by LU factorization with partial pivoting (LAPACK's getrf and getri, NumPy's
// inv): singular when a pivot is exactly zero.
func invert(a []float64, n int64) ([]float64, bool) {
	lu := append([]float64(nil), a...)
	perm := make([]int64, n)
	for i := range perm {
		perm[i] = int64(i)
	}
	for c := int64(0); c < n; c++ {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(lu[r*n+c]) > math.Abs(lu[p*n+c]) {
				p = r
			}
		}
		if lu[p*n+c] == 0 {
			return nil, false
		}
		if p != c {
			for j := int64(0); j < n; j++ {
				lu[p*n+j], lu[c*n+j] = lu[c*n+j], lu[p*n+j]
			}
			perm[p], perm[c] = perm[c], perm[p]
		}
		pivot := lu[c*n+c]
		for r := c + 1; r < n; r++ {
			f := lu[r*n+c] / pivot
			lu[r*n+c] = f
			if f != 0 {
				rowR, rowC := lu[r*n+c+1:(r+1)*n], lu[c*n+c+1:(c+1)*n]
				for j := range rowR {
					rowR[j] -= f * rowC[j]
				}
			}
		}
	}
	// solve L U X = P I, one right-hand side per column of the identity, kept row-major in x
	x := make([]float64, n*n)
	for i := int64(0); i < n; i++ {
		x[i*n+perm[i]] = 1 // row i of P I
	}
	for i := int64(0); i < n; i++ { // forward: L has a unit diagonal
		xi := x[i*n : (i+1)*n]
		for p := int64(0); p < i; p++ {
			if f := lu[i*n+p]; f != 0 {
				xp := x[p*n : (p+1)*n]
				for j := range xi {
					xi[j] -= f * xp[j]
				}
			}
		}
	}
	for i := n - 1; i >= 0; i-- { // backward
		xi := x[i*n : (i+1)*n]
		for p := i + 1; p < n; p++ {
			if f := lu[i*n+p]; f != 0 {
				xp := x[p*n : (p+1)*n]
				for j := range xi {
					xi[j] -= f * xp[j]
				}
			}
		}
		d := lu[i*n+i]
		for j := range xi {
			xi[j] /= d
		}
	}
	return x, true
}

// execute is contracts/ops.py execute: the arity, one shared dtype, the op's own checks, then the op.
func execute(op string, ops []operand) (result, error) {
	if len(ops) != arity[op] {
		return result{}, badInput("wrong number of operands", fmt.Sprintf("%s takes %d, got %d", op, arity[op], len(ops)))
	}
	for _, a := range ops {
		if a.dtype != ops[0].dtype {
			got := make([]string, len(ops))
			for k, b := range ops {
				got[k] = b.dtype
			}
			return result{}, badInput("bad dtype", "operands must share one dtype of float64, int32, int64; got "+strings.Join(got, ", "))
		}
	}
	a := ops[0]
	r := result{dtype: "float64", rows: a.rows, cols: a.cols}
	switch op {
	case "mul":
		b := ops[1]
		if a.cols != b.rows {
			return r, badInput("shape mismatch", fmt.Sprintf("mul needs A's columns == B's rows, got %s @ %s",
				shapeText(a.rows, a.cols), shapeText(b.rows, b.cols)))
		}
		if a.rows*b.cols > maxResultElements {
			return r, badInput("result too large", fmt.Sprintf("%s is over %d elements", shapeText(a.rows, b.cols), maxResultElements))
		}
		r.dtype, r.cols = a.dtype, b.cols
		if a.dtype == "float64" {
			r.f = mulFloat(a.f, b.f, a.rows, a.cols, b.cols)
		} else {
			r.i = mulInt(a.i, b.i, a.rows, a.cols, b.cols, a.dtype == "int32")
		}
	case "inv":
		if a.rows != a.cols {
			return r, badInput("not square", "inv needs a square matrix, got "+shapeText(a.rows, a.cols))
		}
		m := asFloat(a)
		if a.dtype == "float64" {
			for _, v := range m {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return r, badInput("non-finite entries", "inv needs finite entries (LAPACK's result is undefined otherwise)")
				}
			}
		}
		inv, ok := invert(m, a.rows)
		if !ok {
			return r, badInput("singular matrix", "inv: Singular matrix")
		}
		r.f = inv
	default: // log
		m := asFloat(a)
		out := make([]float64, len(m))
		for k, v := range m {
			if !(v > 0) { // NaN fails this too
				return r, badInput("log needs positive entries", "every entry must be > 0 (and not NaN)")
			}
			out[k] = math.Log(v)
		}
		r.f = out
	}
	return r, nil
}

// encodeReply writes an OpReply holding the result, packed as the official runtimes write it.
func encodeReply(r result) []byte {
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.VarintType)
	m = protowire.AppendVarint(m, uint64(r.rows))
	m = protowire.AppendTag(m, 2, protowire.VarintType)
	m = protowire.AppendVarint(m, uint64(r.cols))
	m = protowire.AppendTag(m, 3, protowire.BytesType)
	m = protowire.AppendString(m, r.dtype)
	var packed []byte
	if r.dtype == "float64" {
		packed = make([]byte, 0, 8*len(r.f))
		for _, v := range r.f {
			packed = protowire.AppendFixed64(packed, math.Float64bits(v))
		}
		m = protowire.AppendTag(m, 4, protowire.BytesType)
	} else {
		packed = make([]byte, 0, 3*len(r.i))
		for _, v := range r.i {
			packed = protowire.AppendVarint(packed, protowire.EncodeZigZag(v))
		}
		m = protowire.AppendTag(m, 5, protowire.BytesType)
	}
	m = protowire.AppendBytes(m, packed)
	out := protowire.AppendTag(make([]byte, 0, len(m)+16), 1, protowire.BytesType)
	return protowire.AppendBytes(out, m)
}

// cpuLock is contracts/cpu_lock.py: one timed CPU stage at a time on a host.
type cpuLock struct{ fd int }

func openCPULock() (cpuLock, error) {
	path := os.Getenv("TESTBED_CPU_LOCK")
	if path == "" {
		return cpuLock{-1}, nil
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	return cpuLock{fd}, err
}

func (l cpuLock) lock() {
	if l.fd >= 0 {
		for unix.Flock(l.fd, unix.LOCK_EX) == unix.EINTR {
		}
	}
}

func (l cpuLock) unlock() {
	if l.fd >= 0 {
		unix.Flock(l.fd, unix.LOCK_UN)
	}
}

func cpuSeconds() float64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	return float64(ts.Sec) + float64(ts.Nsec)*1e-9
}

// stageClock is server/timing.py StageClock: each stage's wall and CPU milliseconds, in order.
type stageClock struct {
	lock   cpuLock
	header []string
	waited time.Duration // for the CPU lock: `cpulock`, which communication excludes (contracts/stages.py)
}

func (c *stageClock) stage(name string, body func() error) error {
	asked := time.Now()
	c.lock.lock() // waiting for it counts in no stage
	defer c.lock.unlock()
	start, cpu := time.Now(), cpuSeconds()
	c.waited += start.Sub(asked)
	defer func() { // a stage that failed still took time, and still counts
		ms := float64(time.Since(start).Nanoseconds()) / 1e6
		c.header = append(c.header, fmt.Sprintf("%s;dur=%.3f;cpu=%.3f", name, ms, (cpuSeconds()-cpu)*1000))
	}()
	return body()
}

// runStages is server/stages.py run_stages over the request's raw bytes.
func runStages(body []byte, clock *stageClock, maxBody int64) ([]byte, error) {
	// an image op runs its own stages (images.go); naming the op only slices the message, untimed
	if name, matrices, err := parseRequest(body); err == nil && allImageOps[name] {
		return runImageStages(body, name, len(matrices), clock, maxBody)
	}
	var op string
	var ops []operand
	err := clock.stage("decode", func() error {
		name, matrices, err := parseRequest(body)
		if err != nil {
			return badInput("malformed protobuf", "request is not an OpRequest: "+err.Error())
		}
		if len(matrices) > maxOperands {
			return overLimit("too many operands", fmt.Sprintf("%d operands; at most %d", len(matrices), maxOperands))
		}
		for k, raw := range matrices {
			m, err := parseMatrix(raw)
			if err != nil {
				return badInput("malformed protobuf", "request is not an OpRequest: "+err.Error())
			}
			a, err := operandOf(m, "operand "+strconv.Itoa(k))
			if err != nil {
				return err
			}
			ops = append(ops, a)
		}
		if _, known := arity[name]; !known {
			return refuse(codes.Unimplemented, "unknown operation", fmt.Sprintf("'%s'; known: mul, inv, log, gray", name))
		}
		op = name
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ops) > 0 {
		if err := checkRequest(op, ops, maxBody); err != nil {
			return nil, err
		}
	}
	var r result
	if err := clock.stage("compute", func() (err error) { r, err = execute(op, ops); return }); err != nil {
		return nil, err
	}
	var out []byte
	clock.stage("encode", func() error { out = encodeReply(r); return nil })
	return out, nil
}

// rawCodec hands the handler the request's bytes and sends the reply's as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return v.([]byte), nil }

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = data
	return nil
}

func (rawCodec) String() string { return "proto" }
func (rawCodec) Name() string   { return "proto" }

type service struct {
	mu      sync.Mutex // one request at a time: trials never share a CPU
	lock    cpuLock
	maxBody int64
}

func (s *service) execute(ctx context.Context, body []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clock := &stageClock{lock: s.lock}
	out, err := func() (out []byte, err error) {
		defer func() { // a bug: logged, answered, and the server goes on
			if p := recover(); p != nil {
				log.Printf("ERROR Execute failed: %v", p)
				err = status.Errorf(codes.Internal, "internal error: %v", p)
			}
		}()
		return runStages(body, clock, s.maxBody)
	}()
	if len(clock.header) > 0 {
		if clock.lock.fd >= 0 {
			clock.header = append(clock.header, fmt.Sprintf("cpulock;dur=%.3f", float64(clock.waited.Nanoseconds())/1e6))
		}
		grpc.SetTrailer(ctx, metadata.Pairs("server-timing", strings.Join(clock.header, ", ")))
	}
	if r, ok := err.(*refused); ok {
		return nil, status.Error(r.code, r.message)
	}
	return out, err
}

func executeHandler(srv interface{}, ctx context.Context, dec func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
	var body []byte
	if err := dec(&body); err != nil {
		return nil, err
	}
	return srv.(*service).execute(ctx, body)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "offload.v1.Offload",
	HandlerType: (*interface{})(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Execute", Handler: executeHandler}},
	Metadata:    "offload.proto",
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("[grpc-go] ")
	bind := flag.String("bind", "127.0.0.1", "address to listen on")
	port := flag.Int("port", -1, "TCP port (0: any free one)")
	maxBodyMB := flag.Float64("max-body-mb", 256, "the largest request, in MiB; bounds every size (contracts/limits.py)")
	parent := flag.Int("parent", 0, "stop when this process is no longer the parent")
	flag.Parse()
	fail := func(problem, fix string) {
		fmt.Fprintf(os.Stderr, "error: %s (fix: %s)\n", problem, fix)
		os.Exit(2)
	}
	if *port < 0 || *port > 65535 {
		fail("--port must be 0-65535", "offload-server-go --port N")
	}
	if !(*maxBodyMB > 0) || *maxBodyMB*mib > math.MaxInt32 {
		fail("--max-body-mb must be in (0, 2048)", "offload-server-go --max-body-mb 256")
	}
	lock, err := openCPULock()
	if err != nil {
		fail("cannot open the CPU lock: "+err.Error(), "unset TESTBED_CPU_LOCK or make its folder")
	}
	maxBody := int64(*maxBodyMB * mib)
	listener, err := net.Listen("tcp", net.JoinHostPort(*bind, strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: cannot listen on %s:%d for gRPC: %v (fix: choose a free --port)\n", *bind, *port, err)
		os.Exit(1)
	}
	server := grpc.NewServer(grpc.CustomCodec(rawCodec{}), grpc.MaxRecvMsgSize(int(maxBody)), grpc.MaxSendMsgSize(math.MaxInt32))
	server.RegisterService(&serviceDesc, &service{lock: lock, maxBody: maxBody})
	log.Printf("INFO gRPC offload.v1.Offload on %s:%d", *bind, listener.Addr().(*net.TCPAddr).Port)
	go server.Serve(listener)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Second)
	for running := true; running; {
		select {
		case <-stop:
			running = false
		case <-tick.C:
			running = *parent == 0 || os.Getppid() == *parent
		}
	}
	done := make(chan struct{})
	go func() { server.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		server.Stop()
	}
}
