// zkgo runs named scenarios of the Go ZooKeeper client github.com/go-zookeeper/zk against a
// server list, for the compatibility suite (tests/zk/test_go.py runs it against synod and
// against Apache ZooKeeper 3.8).
//
//	zkgo [-servers host:port,...] SCENARIO
//
// The server list may also come from ZK_SERVERS. It exits 0 after printing "PASS SCENARIO", or 1
// after printing "FAIL SCENARIO: reason" on stderr (with the clients' log). A scenario that needs
// a server killed prints "KILL host:port" (or "STOP host:port" for SIGSTOP) on stdout and waits
// for a line on stdin once the driver has done it.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
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
		failf("%s: unexpected error %v", what, err)
	}
}

// expectErr checks that err is want (compared with errors.Is).
func expectErr(err, want error, what string) {
	if !errors.Is(err, want) {
		failf("%s: got error %v, want %v", what, err, want)
	}
}

func waitFor(what string, d time.Duration, cond func() bool) {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			failf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func logf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "%s zkgo: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

var scenarios = map[string]func(*env){
	"session":             scenarioSession,
	"create_modes":        scenarioCreateModes,
	"crud":                scenarioCRUD,
	"watches":             scenarioWatches,
	"multi":               scenarioMulti,
	"acl":                 scenarioACL,
	"sync":                scenarioSync,
	"lock":                scenarioLock,
	"reconnect":           func(e *env) { scenarioReconnect(e, false) },
	"reconnect_frozen":    func(e *env) { scenarioReconnect(e, true) },
	"exists_without_read": scenarioExistsWithoutRead,
	"reconnect_missed":    scenarioReconnectMissed,
	"expire_close_same":   func(e *env) { scenarioExpireClose(e, "same") },
	"expire_close_other":  func(e *env) { scenarioExpireClose(e, "other") },
	"expire_timeout":      scenarioExpireTimeout,
}

func main() {
	servers := flag.String("servers", os.Getenv("ZK_SERVERS"), "comma-separated host:port list")
	limit := flag.Duration("timeout", 50*time.Second, "fail if the scenario takes longer")
	flag.Parse()
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	if flag.NArg() != 1 || scenarios[flag.Arg(0)] == nil || *servers == "" {
		fmt.Fprintf(os.Stderr, "usage: zkgo -servers host:port,... SCENARIO\nscenarios: %s\n", strings.Join(names, " "))
		os.Exit(2)
	}
	name := flag.Arg(0)
	e := &env{servers: strings.Split(*servers, ","), in: bufio.NewReader(os.Stdin)}
	time.AfterFunc(*limit, func() {
		fmt.Fprintf(os.Stderr, "FAIL %s: did not finish within %v\n", name, *limit)
		os.Exit(1)
	})
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(failure); ok {
				fmt.Fprintf(os.Stderr, "FAIL %s: %s\n", name, f.msg)
				os.Exit(1)
			}
			panic(r)
		}
	}()
	scenarios[name](e)
	fmt.Printf("PASS %s\n", name)
}
