// fgpu-probe: the one program in the real-kubelet test's local OCI image (hack/node-setup.sh packs it).
// Run as a pod's container it prints, on stdout (the pod's log), what the container was handed:
//
//	env KEY=VALUE             every environment variable
//	mount <target> <fstype>   every mount point (/proc/self/mountinfo)
//	socket <path> ok|<error>  for $FGPU_DAEMON_SOCKET: whether a unix socket there accepts a connection
//	ready
//
// then sleeps until SIGTERM/SIGINT and exits 0. The same image is containerd's sandbox ("pause") image:
// there the output goes nowhere and the sleeping is the point.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	out := bufio.NewWriter(os.Stdout)
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		fmt.Fprintf(out, "env %s\n", kv)
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
			left, right, found := strings.Cut(line, " - ")
			fields, tail := strings.Fields(left), strings.Fields(right)
			if !found || len(fields) < 5 || len(tail) < 1 {
				continue
			}
			fmt.Fprintf(out, "mount %s %s\n", fields[4], tail[0])
		}
	} else {
		fmt.Fprintf(out, "mounts unreadable: %v\n", err)
	}
	if path := os.Getenv("FGPU_DAEMON_SOCKET"); path != "" {
		fmt.Fprintf(out, "socket %s %s\n", path, dial(path))
	}
	fmt.Fprintln(out, "ready")
	out.Flush()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

func dial(path string) string {
	info, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	if info.Mode()&os.ModeSocket == 0 {
		return "not a socket: " + info.Mode().String()
	}
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return err.Error()
	}
	conn.Close()
	return "ok"
}
