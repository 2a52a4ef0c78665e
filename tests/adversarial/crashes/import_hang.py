# atrex-test: op=rmsnorm expected=timeout isolate=yes
"""Hangs while being imported."""
import time

while True:
    time.sleep(0.1)
