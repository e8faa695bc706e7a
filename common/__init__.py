"""The bottom floor: what every other package may import (errors for people, file
input/output that never leaves a half-written file looking complete, and run control:
one run per output, a clear end when stopped)."""
