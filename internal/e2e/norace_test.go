//go:build !race

package e2e

// raceDetector is true in a build with the race detector, whose overload of
// the CPU makes some timing premises of the tests false.
const raceDetector = false
