// Command wasmnop is an empty wasip1 c-shared module: the smallest input the
// harness self-test can give BuildWasm.
package main

func main() {}
