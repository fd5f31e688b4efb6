"""The bottom layer, what algorithms are written with: flat views, sums, coordinate shards, messages, requirements,
the local-rule protocol, per-client state stores and their files, seeding."""
