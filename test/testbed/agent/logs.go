package agent

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// serveLogs answers the API server's log requests, as a kubelet's
// /containerLogs/{namespace}/{pod}/{container} does: the container's
// output so far (tailLines limits it to the last lines) and, with
// follow=true, what it writes next until the request ends or the pod stops.
func (a *Agent) serveLogs(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/containerLogs/"), "/")
	if len(parts) != 3 {
		http.Error(w, "want /containerLogs/{namespace}/{pod}/{container}", http.StatusNotFound)
		return
	}
	sb := a.sandboxFor(parts[0], parts[1])
	if sb == nil {
		http.Error(w, "pod "+parts[0]+"/"+parts[1]+" is not running on this testbed's nodes", http.StatusNotFound)
		return
	}
	f, err := os.Open(filepath.Join(sb.dir, parts[2]+".log"))
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, "container "+parts[2]+" has written nothing yet, or the pod has no such container", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer func() { _ = f.Close() }()
	q := req.URL.Query()
	data, err := io.ReadAll(f)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil && n >= 0 {
		data = lastLines(data, n)
	}
	w.Header().Set("Content-Type", "text/plain")
	if _, err := w.Write(data); err != nil || q.Get("follow") != "true" {
		return
	}
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32*1024)
	for {
		if flusher != nil {
			flusher.Flush()
		}
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return
		}
		sb.mu.Lock()
		stopping := sb.stopping
		sb.mu.Unlock()
		if stopping {
			return
		}
		select {
		case <-req.Context().Done():
			return
		case <-time.After(200 * time.Millisecond): // a log file has no change notification here
		}
	}
}

// lastLines returns the last n lines of data.
func lastLines(data []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := 0; i < n; i++ {
		j := bytes.LastIndexByte(data[:end], '\n')
		if j < 0 {
			return data
		}
		if i == n-1 {
			return data[j+1:]
		}
		end = j
	}
	return data
}
