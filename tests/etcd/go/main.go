// etcdgo runs checks of etcd's official Go client (go.etcd.io/etcd/client/v3 and its
// concurrency package) against an etcd v3 endpoint list, for the compatibility suite
// (tests/etcd/test_go.py runs it against a real etcd 3.4 and against synod).
//
//	etcdgo -endpoints URL[,URL...] [-cacert FILE] [-timeout 60s] [CHECK...]
//
// With no CHECK it runs them all (kv, mutex, election, stm, watch, lease), in that order. Each
// check that passes prints "ok CHECK" on stdout; the first that fails prints "FAIL CHECK: reason"
// on stderr and the program exits 1. Keys live under a prefix unique to the run, so that runs
// can share a server.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ---------------------------------------------------------------- failures

type failure struct{ msg string }

func failf(format string, args ...interface{}) {
	panic(failure{fmt.Sprintf(format, args...)})
}

func check(ok bool, format string, args ...interface{}) {
	if !ok {
		failf(format, args...)
	}
}

func must(err error, what string) {
	if err != nil {
		failf("%s: unexpected error: %v", what, err)
	}
}

// expectErr checks that err is want (errors.Is, or the same gRPC status as an rpctypes error).
func expectErr(err, want error, what string) {
	if err == nil {
		failf("%s: no error, want %v", what, want)
	}
	if errors.Is(err, want) || rpctypes.Error(err) == want || err.Error() == want.Error() {
		return
	}
	failf("%s: got error %v, want %v", what, err, want)
}

// ---------------------------------------------------------------- environment

// env is what a check gets: a client, a key prefix unique to this run and check, and a
// context that ends at the check's deadline.
type env struct {
	cli    *clientv3.Client
	prefix string
	ctx    context.Context
	cfg    clientv3.Config
}

// op returns a context for one operation: at most d, and never past the check's deadline.
func (e *env) op(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, d)
}

// newClient opens another client on the same endpoints (the caller closes it).
func (e *env) newClient() *clientv3.Client {
	c, err := clientv3.New(e.cfg)
	must(err, "new client")
	return c
}

type checkFn func(e *env)

var checks = []struct {
	name string
	fn   checkFn
}{
	{"kv", checkKV},
	{"mutex", checkMutex},
	{"election", checkElection},
	{"stm", checkSTM},
	{"watch", checkWatch},
	{"lease", checkLease},
}

func main() {
	endpoints := flag.String("endpoints", "http://127.0.0.1:2379", "comma-separated endpoint URLs")
	cacert := flag.String("cacert", "", "CA certificate file: use TLS, trusting that CA")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline for the whole run")
	flag.Parse()

	cfg := clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: 5 * time.Second,
	}
	if *cacert != "" {
		pem, err := os.ReadFile(*cacert)
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL setup: reading %s: %v\n", *cacert, err)
			os.Exit(1)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fmt.Fprintf(os.Stderr, "FAIL setup: no certificate in %s\n", *cacert)
			os.Exit(1)
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}

	want := flag.Args()
	if len(want) == 0 {
		for _, c := range checks {
			want = append(want, c.name)
		}
	}
	byName := map[string]checkFn{}
	for _, c := range checks {
		byName[c.name] = c.fn
	}
	for _, n := range want {
		if byName[n] == nil {
			fmt.Fprintf(os.Stderr, "FAIL setup: unknown check %q\n", n)
			os.Exit(2)
		}
	}

	cli, err := clientv3.New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL setup: clientv3.New(%v): %v\n", cfg.Endpoints, err)
		os.Exit(1)
	}
	defer cli.Close()

	deadline := time.Now().Add(*timeout)
	// A check that hangs despite its contexts (a bug in a library wait) still ends the run.
	go func() {
		time.Sleep(time.Until(deadline) + 5*time.Second)
		fmt.Fprintf(os.Stderr, "FAIL run: still running %v after the -timeout deadline\n", 5*time.Second)
		os.Exit(1)
	}()

	run := fmt.Sprintf("%d-%04d", time.Now().UnixNano(), rand.Intn(10000))
	for _, n := range want {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		e := &env{cli: cli, prefix: "/etcdgo/" + run + "/" + n + "/", ctx: ctx, cfg: cfg}
		start := time.Now()
		if msg := runCheck(byName[n], e); msg != "" {
			cancel()
			fmt.Fprintf(os.Stderr, "FAIL %s: %s\n", n, msg)
			os.Exit(1)
		}
		cancel()
		fmt.Printf("ok %s (%.2fs)\n", n, time.Since(start).Seconds())
	}
}

func runCheck(fn checkFn, e *env) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(failure); ok {
				msg = f.msg
				return
			}
			panic(r)
		}
	}()
	fn(e)
	return ""
}

// ---------------------------------------------------------------- small helpers

func put(e *env, k, v string, opts ...clientv3.OpOption) *clientv3.PutResponse {
	ctx, cancel := e.op(10 * time.Second)
	defer cancel()
	r, err := e.cli.Put(ctx, k, v, opts...)
	must(err, fmt.Sprintf("Put(%q)", k))
	return r
}

func get(e *env, k string, opts ...clientv3.OpOption) *clientv3.GetResponse {
	ctx, cancel := e.op(10 * time.Second)
	defer cancel()
	r, err := e.cli.Get(ctx, k, opts...)
	must(err, fmt.Sprintf("Get(%q)", k))
	return r
}

// value is k's value, or "" (and false) when it does not exist.
func value(e *env, k string) (string, bool) {
	r := get(e, k)
	if len(r.Kvs) == 0 {
		return "", false
	}
	return string(r.Kvs[0].Value), true
}

func keys(kvs []*mvccpb.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = string(kv.Key)
	}
	return out
}

// currentRev is the store's revision now.
func currentRev(e *env) int64 {
	return get(e, e.prefix+"no-such-key").Header.Revision
}
