// The Docker client role: Docker Engine API calls over HTTP/1.1 on a unix socket, from N goroutines
// sharing keep-alive connections (net/http), raw bytes (answers are read and counted, not decoded,
// except the few fields an exec round trip needs). Prints the same JSON object as the gRPC client.
//
//	list     GET /v1.41/containers/json?all=1
//	inspect  GET /v1.41/containers/{id}/json, cycling through the ids of -ids
//	exec     POST /containers/{id}/exec (create), POST /exec/{id}/start with Connection: Upgrade,
//	         Upgrade: tcp (101, then the raw output stream until EOF, as the docker CLI and cri-dockerd
//	         read it), GET /exec/{id}/json until it no longer runs (exit code 0 expected): one call
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

const dockerAPI = "http://docker/v1.41"

// execInspectPolls bounds the inspects after the output stream ends; dockerd records the exit code
// a moment after it closes the stream, so the first inspect may still say Running.
const execInspectPolls = 1000

var (
	execCreateBody = []byte(`{"AttachStdin":false,"AttachStdout":true,"AttachStderr":true,"Tty":false,"Cmd":["echo","x"]}`)
	execStartBody  = []byte(`{"Detach":false,"Tty":false}`)
)

type dockerCaller struct {
	errorLog
	client   *http.Client
	timeout  time.Duration
	op       func(c *dockerCaller, ctx context.Context) (int64, error)
	ids      []string
	next     uint64
	lastSize int64
	polls    int64 // exec inspects after the first
}

func runDockerClient(args []string) error {
	flags := flag.NewFlagSet("dockerclient", flag.ExitOnError)
	socket := flags.String("socket", "", "Docker Engine API socket")
	opName := flags.String("op", "list", "list, inspect or exec")
	idsFile := flags.String("ids", "", "file of container ids, one a line (inspect: cycled; exec: the first)")
	load := addLoadFlags(flags)
	timeout := flags.Float64("timeout", 120, "deadline of each call in seconds")
	flags.Parse(args)

	ops := map[string]func(*dockerCaller, context.Context) (int64, error){
		"list": (*dockerCaller).list, "inspect": (*dockerCaller).inspect, "exec": (*dockerCaller).exec}
	op, ok := ops[*opName]
	if !ok {
		return fmt.Errorf("unknown -op %q (list, inspect, exec)", *opName)
	}
	c := &dockerCaller{client: &http.Client{Transport: unixTransport(*socket, *load.concurrency)}, op: op,
		timeout: time.Duration(*timeout * float64(time.Second))}
	if *idsFile != "" {
		data, err := os.ReadFile(*idsFile)
		if err != nil {
			return err
		}
		c.ids = strings.Fields(string(data))
	}
	if *opName != "list" && len(c.ids) == 0 {
		return fmt.Errorf("-op %s needs container ids (-ids)", *opName)
	}
	out, err := warmUpAndMeasure(c, &c.errorLog, load)
	if err != nil {
		return err
	}
	out.ResponseBytes = int(atomic.LoadInt64(&c.lastSize))
	out.ExtraRequests = atomic.LoadInt64(&c.polls)
	return json.NewEncoder(os.Stdout).Encode(out)
}

func (c *dockerCaller) call() bool {
	// A deadline through the context, not http.Client.Timeout: that one would hide a 101 body's writer.
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	size, err := c.op(c, ctx)
	if err != nil {
		return c.record(err)
	}
	atomic.StoreInt64(&c.lastSize, size)
	return true
}

func (c *dockerCaller) list(ctx context.Context) (int64, error) {
	return c.do(ctx, "GET", "/containers/json?all=1", nil, http.StatusOK, nil, nil)
}

func (c *dockerCaller) inspect(ctx context.Context) (int64, error) {
	id := c.ids[int(atomic.AddUint64(&c.next, 1)-1)%len(c.ids)]
	return c.do(ctx, "GET", "/containers/"+id+"/json", nil, http.StatusOK, nil, nil)
}

// exec is one exec round trip; its size is the output stream's bytes.
func (c *dockerCaller) exec(ctx context.Context) (int64, error) {
	var created struct{ Id string }
	if _, err := c.do(ctx, "POST", "/containers/"+c.ids[0]+"/exec", execCreateBody, http.StatusCreated, nil,
		&created); err != nil {
		return 0, err
	}
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"tcp"}}
	size, err := c.do(ctx, "POST", "/exec/"+created.Id+"/start", execStartBody, http.StatusSwitchingProtocols,
		upgrade, nil)
	if err != nil {
		return 0, err
	}
	for poll := 0; poll < execInspectPolls; poll++ {
		if poll > 0 {
			atomic.AddInt64(&c.polls, 1)
			time.Sleep(time.Millisecond)
		}
		var state struct {
			Running  bool
			ExitCode int
		}
		if _, err := c.do(ctx, "GET", "/exec/"+created.Id+"/json", nil, http.StatusOK, nil, &state); err != nil {
			return 0, err
		}
		if !state.Running {
			if state.ExitCode != 0 {
				return 0, fmt.Errorf("exec exited with %d", state.ExitCode)
			}
			return size, nil
		}
	}
	return 0, fmt.Errorf("exec %s still running after its stream ended", created.Id)
}

// do sends one request and reads the whole answer: to EOF, so that a keep-alive connection goes back
// to the pool (after a 101, the raw stream until dockerd closes it). Returns the answer's size; the
// bytes are decoded into `into` when one is given, else discarded undecoded.
func (c *dockerCaller) do(ctx context.Context, method, path string, body []byte, want int, header http.Header,
	into interface{}) (int64, error) {
	request, err := http.NewRequestWithContext(ctx, method, dockerAPI+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	for key, values := range header {
		request.Header[key] = values
	}
	if body != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	response, err := c.client.Do(request)
	if err != nil {
		return 0, err
	}
	defer response.Body.Close()
	if response.StatusCode != want {
		snippet, _ := io.ReadAll(io.LimitReader(response.Body, 200))
		return 0, fmt.Errorf("%s %s: %s (want %d): %s", method, path, response.Status, want, snippet)
	}
	if into == nil {
		size, err := io.Copy(io.Discard, response.Body)
		if err != nil {
			return 0, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
		}
		return size, nil
	}
	data, err := io.ReadAll(response.Body)
	if err == nil {
		err = json.Unmarshal(data, into)
	}
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return int64(len(data)), nil
}
