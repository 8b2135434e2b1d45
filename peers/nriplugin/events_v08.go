//go:build nri_v08

// Built against stub v0.8 (peers/nri-v0.8.mod): the events it knows are all in main.go.
package main

const stubLine = "v0.8"
