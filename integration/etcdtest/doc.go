// Package etcdtest starts real etcd clusters inside the test process
// (go.etcd.io/etcd/server/v3/embed; no etcd binary), so that you can test
// your own lease-protected code against etcd, with faults (package
// integration/faults) and a history checker (package integration/check).
//
// In a test:
//
//	func TestOrders(t *testing.T) {
//		c := etcdtest.Start(t, etcdtest.WithMembers(3))
//		cli := c.Client(t) // closed on cleanup, like c
//		locks, err := lease.New(cli, lease.WithTTL(time.Second))
//		...
//		kill := faults.KillLeader(c.FaultMembers()...)
//		err = faults.Apply(ctx, kill, time.Second)
//	}
//
// Start returns once every member is ready and all agree on a leader, and
// closes the cluster in t.Cleanup. Outside tests (examples, demos, your own
// harness) StartCluster does the same with a Config and returns an error;
// call Close when done.
//
// # What you get
//
//   - 1 to 9 members (WithMembers) on loopback TCP ports found free, or
//     with clients on unix sockets (WithUnixSockets); data in the test's
//     temporary directory; etcd's logs off unless WithLogger.
//   - raft timing of 10 ms ticks and 100 ms elections, so that 1 s lease
//     TTLs are possible (WithTiming to change it); fsync on unless
//     WithoutFsync.
//   - TLS for clients and peers with certificates generated per cluster
//     (WithTLS), and authentication with a root user (WithAuth). Client,
//     NewClient and ClientConfig carry both.
//   - Members that satisfy faults.Member: Stop stops one (a leader hands
//     its leadership over first when a follower is up to date, as etcd
//     does on shutdown), Restart brings it back on the same addresses and
//     data. Leader and WaitLeader follow elections.
//   - Proxies and ClientThrough give one client its own faults.Proxy per
//     member, for faults.Partition, faults.LostReplies and faults.SlowLink.
//
// # Your etcd binary
//
// WithBinary(path) (Config.Binary) runs the members as separate processes
// of an etcd server binary (v3.5 or newer), such as the version you deploy,
// instead of inside the test process; everything above works the same
// (except WithUnixSockets and WithLogger: each process logs to
// <dir>/<member>.log), and each Member gains Kill (SIGKILL: a crash),
// Pause (SIGSTOP: a frozen machine whose sockets still accept
// connections), Resume and PID (faults.SigstopMember, SigstopLeader,
// SigkillMember and SigkillLeader use them; ProcessMembers lists them). Close stops every process by its PID, and
// on Linux the kernel kills them if the test process dies. fencekit's own
// CI builds 3.5, 3.6 and 3.7 servers this way from its tools/etcdserver
// module.
//
// In-process members and member processes are one Cluster and one Member
// type, the one fencekit's own tests run etcd processes with: only how a
// member's server starts, stops and reports its leader differs. Member
// processes also serve etcd's /metrics and /health on MetricsURL, and
// Cluster.Metric sums a metric over them; in-process members serve none
// (etcd registers its metrics process-wide, so they could not tell
// members apart), and Metric fails for them.
//
// Every cluster is independent: parallel tests each start their own. The
// ports a running cluster uses are never handed to another cluster of the
// same process; another process could still take a port between the
// search and etcd's bind, and StartCluster then retries on fresh ports.
//
// # Start time
//
// Measured by BenchmarkStart on the project's 2-core machine (median of
// 21 starts; Close not counted):
//
//	1 member                 79 ms
//	1 member, fsync off      78 ms
//	3 members               103 ms
//	3 members, fsync off     81 ms
//	1 member, TLS and auth  155 ms
//
// Members are launched one after the other and then awaited together: a
// new member first asks its peers whether it already joined, and a peer
// that listens but does not serve yet would make it wait a second.
//
// # Closing and leak checks
//
// Close (and the cleanup of Start) stops the followers, then the leader,
// and removes the temporary directories. Stopping a member of a running
// cluster takes about a second: etcd waits that long for its peers'
// connections. etcd's peers also leave connections that end up to 5 s
// after the last member stopped; when the last open cluster of the
// process closes, Close waits for them (at most 6 s) so that
// goleak.VerifyTestMain finds no goroutine left behind. Sequential tests
// with multi-member clusters pay that wait each (about 5 s); parallel ones
// (t.Parallel) overlap, and only the last to close waits.
//
// What it is not: a production deployment. Data directories are
// temporary, certificates are self-signed and valid for a day, and with
// WithoutFsync a machine crash loses data.
package etcdtest
