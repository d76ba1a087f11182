// Package pki makes the self-signed certificates of test servers: a CA
// valid for a day, leaf certificates it signs (ECDSA P-256, for
// 127.0.0.1, ::1, localhost and more names), and their PEM files.
//
// internal/etcdproc (etcd members and their clients) and k8s/kubetest
// (kube-apiserver's serving certificate) use it. It is test support: the
// library packages never import it.
package pki
