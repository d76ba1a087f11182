package etcdproc

import (
	"net"
	"sync"
)

// reserved holds the ports handed to clusters of this process that are
// still open.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// ReservePorts returns n free loopback TCP ports, none handed to a
// cluster of this process that is still open. They are released before
// etcd binds them; StartCluster tries again when another process takes
// one in between.
func ReservePorts(n int) ([]int, error) {
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
			continue
		}
		reserved.ports[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// ReleasePorts makes ports available to ReservePorts again.
func ReleasePorts(ports []int) {
	reserved.Lock()
	defer reserved.Unlock()
	for _, p := range ports {
		delete(reserved.ports, p)
	}
}
