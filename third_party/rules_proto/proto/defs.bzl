"""Offline stand-in for @rules_proto//proto:defs.bzl (Bazel 4.2.3 native rules)."""

proto_lang_toolchain = native.proto_lang_toolchain
proto_library = native.proto_library
