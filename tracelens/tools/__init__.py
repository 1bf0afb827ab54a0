"""External tools tracelens drives (Nsight Systems), shared by the parsers and the collector."""
