#!/bin/sh
# The pgbench scenario's tables (pktflow.lab.scenarios, scenario "pgbench": scale 1).
set -e
pgbench -i -q -s 1 -U postgres lab
