// Package proc runs a test server as a child process: started on a
// thread that lives as long as the process (so that on Linux the kernel
// kills the child when the test process dies, however it dies), its
// output appended to a log file, stopped by its PID with SIGTERM and then
// SIGKILL after a timeout, paused and resumed with SIGSTOP and SIGCONT.
// Errors that report an early exit quote the end of the log and match
// syscall.EADDRINUSE when a port was taken, so that callers can retry on
// other ports.
//
// internal/etcdproc (etcd members), internal/s3proc (versitygw) and
// k8s/kubetest (kube-apiserver) start their processes through it. It is
// test support: the library packages never import it.
package proc
