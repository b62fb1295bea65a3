"""ssdbench harness: problem spec, inputs, timing, statistics, records, reports, regression gate."""
