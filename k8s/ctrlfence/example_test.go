package ctrlfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/integration/etcdtest"
	"github.com/fencekit/fencekit/k8s/ctrlfence"
	"github.com/fencekit/fencekit/k8s/fencelock"
	"github.com/fencekit/fencekit/sqlguard"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	_ "modernc.org/sqlite"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// A controller-runtime manager elects through fencekit, and its
// reconciler writes to SQL through sqlguard with the leader's token,
// found in the reconcile ctx. The events come from a channel so that the
// example runs without an API server; a reconciler of real objects gets
// its ctx the same way.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	dir, err := os.MkdirTemp("", "ctrlfence-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cluster, err := etcdtest.StartCluster(ctx, etcdtest.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	cli, err := cluster.NewClient()
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	g, err := sqlguard.Open(ctx, db)
	if err != nil {
		panic(err)
	}
	if err := g.Migrate(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`CREATE TABLE seen (name TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		panic(err)
	}

	lock, err := fencelock.New(cli, "configmap-counter", "pod-a", fencelock.WithTTL(2*time.Second))
	if err != nil {
		panic(err)
	}
	defer lock.Close()
	opts, err := ctrlfence.Options(lock, manager.Options{
		Logger:  logr.Discard(),
		Metrics: metricsserver.Options{BindAddress: "0"}, // no metrics server here
	})
	if err != nil {
		panic(err)
	}
	mgr, err := manager.New(&rest.Config{Host: "http://127.0.0.1:1"}, opts) // no API server is contacted
	if err != nil {
		panic(err)
	}
	if err := mgr.AddHealthzCheck("fencekit", ctrlfence.HealthCheck(lock)); err != nil {
		panic(err)
	}

	done := make(chan string, 1)
	c, err := controller.New("counter", mgr, controller.Options{
		SkipNameValidation: new(true),
		Reconciler: reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			tok, ok := fence.FromContext(ctx)
			if !ok {
				return reconcile.Result{}, fmt.Errorf("no fencing token: not leading")
			}
			err := g.RunTx(ctx, db, nil, tok, []string{"seen/" + req.Name}, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO seen VALUES (?, 1) ON CONFLICT(name) DO UPDATE SET n = n + 1`, req.Name)
				return err
			})
			done <- fmt.Sprintf("reconciled %s with the leader's token: %v", req.Name, err)
			return reconcile.Result{}, err
		}),
	})
	if err != nil {
		panic(err)
	}
	events := make(chan event.GenericEvent, 1)
	if err := c.Watch(source.Channel(events, &handler.EnqueueRequestForObject{})); err != nil {
		panic(err)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	<-mgr.Elected()
	events <- event.GenericEvent{Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}}
	fmt.Println(<-done)

	var n int
	if err := db.QueryRow(`SELECT n FROM seen WHERE name = 'settings'`).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("rows written:", n)
	tok, _ := lock.Fence()
	mark, err := g.Mark(ctx, db, "seen/settings")
	fmt.Println("the row's mark is the term:", err == nil && mark.Token == tok)
	stop()
	fmt.Println("manager stopped:", <-stopped)
	// Output:
	// reconciled settings with the leader's token: <nil>
	// rows written: 1
	// the row's mark is the term: true
	// manager stopped: <nil>
}
