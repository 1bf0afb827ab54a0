"""The hostile-input fuzzer (issue 17): seeded, structure-aware mutations of real traces and exports, each
run through the whole ``tracelens report --format json`` and checked (see README.md)."""
