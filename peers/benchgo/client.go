// The client role: unary calls with pre-encoded request bytes from N goroutines over one
// connection (as the kubelet has one), printing one JSON object with latencies and calls/s.
// measure and summarize are shared with the Docker client role (dockerclient.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

type metadataFlags []string

func (m *metadataFlags) String() string     { return strings.Join(*m, ",") }
func (m *metadataFlags) Set(v string) error { *m = append(*m, v); return nil }

// result is what the client prints; latencies in microseconds.
type result struct {
	Calls         int64   `json:"calls"`
	Errors        int64   `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
	WarmupCalls   int64   `json:"warmup_calls"`
	Concurrency   int     `json:"concurrency"`
	Seconds       float64 `json:"seconds"`
	CallsPerS     float64 `json:"calls_per_s"`
	P50us         float64 `json:"p50_us"`
	P90us         float64 `json:"p90_us"`
	P99us         float64 `json:"p99_us"`
	MaxUs         float64 `json:"max_us"`
	ResponseBytes int     `json:"response_bytes"`
	// The client's own CPU (user + system) per measured call: set beside the hop's to show that the
	// client is not what limits a figure.
	ClientCPUus float64 `json:"client_cpu_us"`
	// Requests beyond an operation's fixed ones (exec: inspects while dockerd still said running).
	ExtraRequests int64 `json:"extra_requests,omitempty"`
}

// callable is one call of whatever a client role drives; false when it failed (recorded in errorLog).
type callable interface {
	call() bool
}

// errorLog counts failed calls and keeps the first one's message.
type errorLog struct {
	errors   int64
	mu       sync.Mutex
	firstErr string
}

func (e *errorLog) record(err error) bool {
	if atomic.AddInt64(&e.errors, 1) == 1 {
		e.mu.Lock()
		e.firstErr = err.Error()
		e.mu.Unlock()
	}
	return false
}

func (e *errorLog) first() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.firstErr
}

type caller struct {
	errorLog
	conn     *grpc.ClientConn
	method   string
	request  []byte
	ctx      context.Context
	timeout  time.Duration // per call, as the kubelet sets one on every call; 0: none
	lastSize int64
}

func (c *caller) call() bool {
	ctx := c.ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var response []byte
	if err := c.conn.Invoke(ctx, c.method, &c.request, &response); err != nil {
		return c.record(err)
	}
	atomic.StoreInt64(&c.lastSize, int64(len(response)))
	return true
}

func runClient(args []string) error {
	flags := flag.NewFlagSet("client", flag.ExitOnError)
	socket := flags.String("socket", "", "server socket")
	method := flags.String("method", "", "full method path")
	requestFile := flags.String("request", "", "file with the encoded request (empty: no bytes)")
	load := addLoadFlags(flags)
	timeout := flags.Float64("timeout", 0, "deadline of each call in seconds (0: none)")
	var pairs metadataFlags
	flags.Var(&pairs, "metadata", "key=value sent with every call (repeatable)")
	flags.Parse(args)

	c := &caller{method: *method, ctx: context.Background(), timeout: time.Duration(*timeout * float64(time.Second))}
	if *requestFile != "" {
		data, err := os.ReadFile(*requestFile)
		if err != nil {
			return err
		}
		c.request = data
	}
	for _, pair := range pairs {
		key, value, _ := strings.Cut(pair, "=")
		c.ctx = metadata.AppendToOutgoingContext(c.ctx, key, value)
	}
	conn, err := dialUnix(*socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	c.conn = conn
	out, err := warmUpAndMeasure(c, &c.errorLog, load)
	if err != nil {
		return err
	}
	out.ResponseBytes = int(atomic.LoadInt64(&c.lastSize))
	return json.NewEncoder(os.Stdout).Encode(out)
}

// loadFlags are how every client role loads its peer.
type loadFlags struct {
	concurrency   *int
	seconds       *float64
	count, warmup *int64
	interval      *float64
}

func addLoadFlags(flags *flag.FlagSet) loadFlags {
	return loadFlags{
		concurrency: flags.Int("concurrency", 1, "goroutines calling at once"),
		seconds:     flags.Float64("seconds", 1, "measure this long (unless -count)"),
		count:       flags.Int64("count", 0, "measure exactly this many calls"),
		warmup:      flags.Int64("warmup", 0, "calls before measuring (sequential)"),
		interval: flags.Float64("interval", 0,
			"seconds each goroutine pauses after a call (0: none): sparse calls, as a kubelet makes them"),
	}
}

// warmUpAndMeasure makes the warm-up calls one after another (their errors are forgotten unless all
// failed), then measures; the result lacks only ResponseBytes.
func warmUpAndMeasure(c callable, log *errorLog, load loadFlags) (result, error) {
	warmup, concurrency := *load.warmup, *load.concurrency
	for i := int64(0); i < warmup; i++ {
		c.call()
	}
	warmupErrors := atomic.SwapInt64(&log.errors, 0)
	if warmupErrors == warmup && warmup > 0 {
		return result{}, fmt.Errorf("every warm-up call failed: %s", log.first())
	}
	cpuBefore := cpuSeconds()
	pause := time.Duration(*load.interval * float64(time.Second))
	latencies, elapsed := measure(c, concurrency, *load.seconds, *load.count, pause)
	cpuUsed := cpuSeconds() - cpuBefore
	out := summarize(latencies, elapsed)
	if out.Calls > 0 {
		out.ClientCPUus = cpuUsed * 1e6 / float64(out.Calls)
	}
	out.Errors, out.FirstError = atomic.LoadInt64(&log.errors), log.first()
	out.WarmupCalls, out.Concurrency = warmup, concurrency
	return out, nil
}

// cpuSeconds is this process's user + system CPU time so far.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

// measure runs the goroutines until the time is up (or the count is done), each pausing `pause` after
// every call; successful calls' latencies.
func measure(c callable, concurrency int, seconds float64, count int64, pause time.Duration) ([]time.Duration, time.Duration) {
	perWorker := make([][]time.Duration, concurrency)
	remaining := count
	deadline := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	var wg sync.WaitGroup
	started := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				if count > 0 {
					if atomic.AddInt64(&remaining, -1) < 0 {
						return
					}
				} else if time.Now().After(deadline) {
					return
				}
				before := time.Now()
				if c.call() {
					perWorker[w] = append(perWorker[w], time.Since(before))
				}
				if pause > 0 {
					if count == 0 && time.Until(deadline) < pause {
						time.Sleep(time.Until(deadline)) // a pause never outlasts the run
					} else {
						time.Sleep(pause)
					}
				}
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(started)
	var all []time.Duration
	for _, latencies := range perWorker {
		all = append(all, latencies...)
	}
	return all, elapsed
}

func summarize(latencies []time.Duration, elapsed time.Duration) result {
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	out := result{Calls: int64(len(latencies)), Seconds: elapsed.Seconds()}
	if len(latencies) == 0 {
		return out
	}
	out.CallsPerS = float64(len(latencies)) / elapsed.Seconds()
	out.P50us = micros(nearestRank(latencies, 50))
	out.P90us = micros(nearestRank(latencies, 90))
	out.P99us = micros(nearestRank(latencies, 99))
	out.MaxUs = micros(latencies[len(latencies)-1])
	return out
}

// nearestRank is the nearest-rank percentile of sorted values (the same rule as bench.py's).
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	rank := int(float64(len(sorted))*q/100 + 0.999999999)
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
