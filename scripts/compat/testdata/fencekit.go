// This file is added to each scratch module by run.sh, with fencekit.

package main

import (
	"database/sql"
	"net/http"

	"github.com/fencekit/fencekit/guard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sqlguard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fenced builds what a service next to Kubernetes would: leases, an HTTP
// guard and a SQL guard.
func fenced(cli *clientv3.Client, db *sql.DB, h http.Handler) error {
	locks, err := lease.New(cli)
	if err != nil {
		return err
	}
	defer locks.Close()
	g, err := guard.New(guard.NewMemoryStore())
	if err != nil {
		return err
	}
	_ = g
	_, err = sqlguard.New(sqlguard.PostgreSQL)
	_ = db
	return err
}

var _ = fenced
