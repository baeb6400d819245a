#!/usr/bin/env python3
"""Runs a command with a pseudo-terminal as its stdin, as if a user had started it by hand
in a terminal, and pipes for its stdout and stderr.

Usage: pty_stdin.py COMMAND [ARGS...]

Types Ctrl-D into the terminal at once (the line discipline keeps it until the command
reads, which then sees the end of its input), waits for the command to end (60 s at most),
then writes what it printed on stdout to this script's stdout and what it printed on
stderr to this script's stderr, and exits with its status (124 when it did not end).
The terminal stays open until the command has ended: closing it first would hang it up,
and a hung-up terminal is no longer one.
"""

import os
import pty
import subprocess
import sys

END_OF_INPUT = b"\x04"  # VEOF, Ctrl-D, in a fresh terminal's canonical mode


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: pty_stdin.py COMMAND [ARGS...]")
    controller, terminal = pty.openpty()
    child = subprocess.Popen(
        sys.argv[1:], stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    os.close(terminal)
    os.write(controller, END_OF_INPUT)
    try:
        out, err = child.communicate(timeout=60)
        status = child.returncode
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        status = 124
    os.close(controller)
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(err)
    # A signal's death (a negative status in Python) as a shell reports it.
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main()
