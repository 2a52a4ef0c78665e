"""What the forging cheats share: a message written on every socket this process holds (the
executor's channel to the judge among them)."""
import os
import socket

from atrex.runner.contract import wire


def send_on_every_socket(body: dict, blobs: list) -> None:
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                wire.send_message(socket.socket(fileno=os.dup(int(fd))), body, blobs)
        except OSError:
            pass
