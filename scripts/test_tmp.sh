# test_tmp.sh - sourced by scripts/test.sh and bench/repeat_tests.sh:
#   hk_test_tmp DIR
# points every temporary file that tests and their jobs make at DIR, so
# that removing DIR removes them all: the tests' own (TMPDIR, which the
# harness and mktemp use, and where failing test jobs write their flight
# records: observe/flight.h) and Open MPI's shared-memory segments (else
# in /dev/shm).
hk_test_tmp() {
  export TMPDIR=$1
  export OMPI_MCA_btl_vader_backing_directory=$1
}
