module raygate.invalid/bench/goextender

go 1.24
