// The backend role: an instant CRI backend that answers from files, so that "direct" is
// limited by the client and the transport, never by a Python server.
package main

import (
	"bytes"
	"flag"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"

	"google.golang.org/grpc"
)

// sizeMarker in a request asks for an answer of about the decimal number of bytes after it. It is
// in the request (e.g. a ListContainers filter's id, "size=16777216"), not in metadata, so that every
// relay, even one that drops metadata, gets the same answer.
var sizeMarker = []byte("size=")

// answers holds, per method name, the response bytes read from DIR/NAME.bin; a method with a
// DIR/NAME.unit.bin answers that unit repeated up to the size its request asks for (a repeated
// field's entries concatenate into one valid message). Any other method echoes its request.
type answers struct {
	dir   string
	fixed map[string][]byte
	mu    sync.Mutex
	sized map[string][]byte
}

func runBackend(args []string) error {
	flags := flag.NewFlagSet("backend", flag.ExitOnError)
	listen := flags.String("listen", "", "socket to serve on")
	dir := flags.String("answers", "", "directory of NAME.bin and NAME.unit.bin answers")
	flags.Parse(args)
	canned := &answers{dir: *dir, fixed: map[string][]byte{}, sized: map[string][]byte{}}
	files, _ := filepath.Glob(filepath.Join(*dir, "*.bin"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		canned.fixed[filepath.Base(file)] = data
	}
	os.Remove(*listen)
	listener, err := listenUnix(*listen)
	if err != nil {
		return err
	}
	server := rawServer(func(_ interface{}, stream grpc.ServerStream) error {
		var request []byte
		if err := stream.RecvMsg(&request); err != nil {
			return err
		}
		method, _ := grpc.MethodFromServerStream(stream)
		response := canned.answer(path.Base(method), request)
		return stream.SendMsg(&response)
	})
	stopOnSignal(server.Stop)
	return server.Serve(listener)
}

func (a *answers) answer(name string, request []byte) []byte {
	if fixed, ok := a.fixed[name+".bin"]; ok {
		return fixed
	}
	unit, ok := a.fixed[name+".unit.bin"]
	if !ok {
		return request
	}
	size := requestedSize(request)
	key := name + "/" + strconv.Itoa(size)
	a.mu.Lock()
	defer a.mu.Unlock()
	if cached, ok := a.sized[key]; ok {
		return cached
	}
	built := make([]byte, 0, size+len(unit))
	for len(built) < size || len(built) == 0 {
		built = append(built, unit...)
	}
	a.sized[key] = built
	return built
}

// requestedSize is the number after sizeMarker in the request; 0 without one.
func requestedSize(request []byte) int {
	at := bytes.Index(request, sizeMarker)
	if at < 0 {
		return 0
	}
	digits := request[at+len(sizeMarker):]
	end := 0
	for end < len(digits) && digits[end] >= '0' && digits[end] <= '9' {
		end++
	}
	size, _ := strconv.Atoi(string(digits[:end]))
	return size
}
