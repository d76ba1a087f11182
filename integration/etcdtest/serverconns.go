package etcdtest

import (
	"bytes"
	"runtime"
	"time"
)

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
