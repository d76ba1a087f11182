// Command fencekit runs commands under named leases (distributed locks) in
// etcd, shows who holds and waits for which lock, and gives operators a
// break-glass release and mark repair.
//
// In a checkout of the repository:
//
//	go install ./cmd/fencekit
//
// and once the release tags are published:
//
//	go install github.com/fencekit/fencekit/cmd/fencekit@v0.1.0
//
// Subcommands: run, status, ls, release, elect, observe, leader, transfer,
// verify, shards and mark. Flags follow the subcommand; the connection
// flags follow etcdctl (--endpoints, --cacert, --cert, --key, --user,
// --password, --dial-timeout, --command-timeout) with the ETCDCTL_*
// environment variables as defaults. "fencekit --help" lists the commands
// and the exit codes, and "fencekit COMMAND --help" prints a command's
// usage and flags, then what it does.
//
// The guide (what run does when the lease is lost or the command exits,
// semaphores, elections and hand-off, status, break-glass release, marks,
// binary sizes and build tags) and the reference generated from --help are
// in cmd/fencekit/README.md:
// https://github.com/fencekit/fencekit/blob/main/cmd/fencekit/README.md
package main
