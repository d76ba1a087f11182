// Package kubetest runs a real Kubernetes API server for tests: a
// kube-apiserver process (built from k8s.io/kubernetes at Version by the
// tool module tools/kubeapiserver) on a free 127.0.0.1 port, storing into
// an etcd 3.6 process, with generated certificates (a self-signed CA, a
// serving certificate, the service-account signing key) and a static
// token file. StartServer returns once /readyz answers; Server.AdminConfig
// and Server.Config give client-go configurations for the admin
// (system:masters) and for the users of Config.Users, and
// Server.ServiceAccountConfig one for a service account, which RBAC
// bindings made by the admin can grant exactly what a test needs. Close
// stops both processes by their PIDs; on Linux the kernel kills them too
// when the test process dies.
//
//	func TestMyController(t *testing.T) {
//		s := kubetest.Start(t, kubetest.Config{})
//		cs := kubernetes.NewForConfigOrDie(s.AdminConfig())
//		...
//	}
//
// # Building the binaries
//
// Tests never build: Start and StartServer use binaries built before, by
// `go run ./cmd/kubetest-assets` in the k8s module (BuildCommand), which
// builds kube-apiserver into the user cache directory
// (fencekit/kube/kube-apiserver-<version>-<key>, keyed by the tool
// module's go.mod and go.sum, the flags and the Go version) and etcd as
// package etcdproc does, and prints a directory holding both in
// controller-runtime's KUBEBUILDER_ASSETS layout, so that existing envtest
// suites can run on them. Without them Start skips the test with that
// command in its message, or fails it when FENCEKIT_REQUIRE_KUBE is 1.
// FENCEKIT_KUBE_APISERVER_BIN and FENCEKIT_ETCD_BIN name binaries to use
// instead (outside a checkout of fencekit, which has the tool modules,
// they are the only way).
//
// # Costs
//
// Measured on 2 shared cores: a cold build takes 10 to 25 minutes (about
// 1.4 GB of module downloads and the Go build cache; a 105 MB binary); a
// warm one, with the build cache kept, about 20 s (the link). A start
// takes 3 to 6 s, etcd included, until /readyz; kube-apiserver then holds
// about 270 MB resident.
//
// What it is not: a cluster. No controller manager, scheduler or kubelet
// runs: a Deployment gets no ReplicaSet and a Pod never starts; nothing
// garbage-collects. Namespaces are not deleted (their finalizer waits for
// the controller manager): make new ones.
package kubetest
