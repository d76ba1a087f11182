package etcdtest

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"time"
)

// reserved holds the ports handed to clusters of this process that are
// still open, so that two clusters started at once never get the same
// port.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// reservePorts returns n free loopback TCP ports, none handed out before
// to a cluster of this process that is still open. The ports are released
// before etcd binds them, so another process could take one in between;
// StartCluster tries again on fresh ports when that happens.
func reservePorts(n int) ([]int, error) {
	reserved.Lock()
	defer reserved.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, p := range ports {
				delete(reserved.ports, p)
			}
			return nil, err
		}
		ls = append(ls, l)
		p := l.Addr().(*net.TCPAddr).Port
		if reserved.ports[p] {
			continue // held open, so the next Listen picks another
		}
		reserved.ports[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// releasePorts makes ports available to reservePorts again.
func releasePorts(ports []int) {
	reserved.Lock()
	defer reserved.Unlock()
	for _, p := range ports {
		delete(reserved.ports, p)
	}
}

// waitServerConns waits, up to limit, until no connection of a stopped
// etcd server is still being read. etcd serves connections through cmux,
// which reads the first bytes of each with a deadline (5 s for peers)
// that can outlast Close after members were stopped and restarted.
func waitServerConns(limit time.Duration) {
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		for n == len(buf) { // truncated: look at every goroutine
			buf = make([]byte, 2*len(buf))
			n = runtime.Stack(buf, true)
		}
		if !bytes.Contains(buf[:n], []byte("soheilhy/cmux")) {
			return
		}
	}
}
