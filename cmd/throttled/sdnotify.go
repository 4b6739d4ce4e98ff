package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// sdNotify tells systemd (a unit of Type=notify) how the sidecar is doing:
// READY=1 once it serves, RELOADING=1 while it reloads, STOPPING=1 as it
// stops, with a STATUS line for systemctl status. It writes one datagram to
// $NOTIFY_SOCKET and does nothing without one. A failure is returned for
// the log; it never stops the sidecar.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// reloading is the message systemd's Type=notify-reload reads at the start
// of a reload: RELOADING=1 with the monotonic clock, in microseconds.
func reloading() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d\nSTATUS=reloading the configuration", ts.Sec*1e6+ts.Nsec/1e3)
}
