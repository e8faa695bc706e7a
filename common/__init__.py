"""The bottom floor: what every other package may import (errors for people, and
file input/output that never leaves a half-written file looking complete)."""
