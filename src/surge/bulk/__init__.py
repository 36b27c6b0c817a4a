"""Many requests: stream inputs in, schedule them, write one result record per input."""
