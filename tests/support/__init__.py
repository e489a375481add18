"""Test harness: a loopback moto S3 server, a fault-injecting proxy and a network-namespace blackhole."""
