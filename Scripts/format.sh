#!/usr/bin/env bash
# Formats every Swift file of the package in place with the checked-in .swift-format.
set -euo pipefail
cd "$(dirname "$0")/.."
swift format --in-place --recursive Package.swift Sources Tests Benchmarks/Package.swift Benchmarks/Sources 2>/dev/null \
  || swift format --in-place --recursive Package.swift Sources Tests
