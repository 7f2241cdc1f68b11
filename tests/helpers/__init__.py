"""Test helpers shared by several test files: the fault proxy (a bad network between a client and
a real server) and small disks that fill up."""
