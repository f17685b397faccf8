package gitops

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/admin/policies"
)

// check is `ratelimit-admin policy check`: offline, what an admin that
// follows the policy (-policy-file, the chart's policySource: git) does
// with it at its next look, so that a pull request shows it before the
// merge: the filter's parser (exit 1 on an error, as the admin would keep
// the current version), the warnings a save shows (rules no request
// reaches, rules and overrides that have ended), and the tests (exit 1
// when one fails). The input is a policy file and its tests, or the
// chart's values with both in them.
func check(positional []string, valuesFile string, verbose bool, junit string, stdin io.Reader, stdout io.Writer) (int, error) {
	name, doc, tests, testsName, err := checkInput(positional, valuesFile, stdin)
	if err != nil {
		return ExitError, err
	}
	norm, warnings, err := policies.Check(doc)
	var ve *policies.ValidationError
	switch {
	case errors.As(err, &ve):
		printValidation(stdout, ve)
		return ExitChanges, nil
	case err != nil:
		return ExitError, err
	}
	for _, w := range warnings {
		fmt.Fprintf(stdout, "warning: rule %q: %s\n", w.Rule, w.Message)
	}
	if tests != nil {
		if code, err := runTestsOf(norm, tests, testsName, verbose, junit, stdout); err != nil || code != ExitOK {
			return code, err
		}
	}
	fmt.Fprintf(stdout, "%s: valid; an admin following it would apply it\n", name)
	return ExitOK, nil
}

// checkInput reads check's policy and tests: FILE [TESTS], or -values.
func checkInput(positional []string, valuesFile string, stdin io.Reader) (name string, doc, tests []byte, testsName string, err error) {
	switch {
	case valuesFile != "" && len(positional) > 0:
		return "", nil, nil, "", errors.New("check: give a policy file (and its tests) or -values, not both")
	case valuesFile != "":
		doc, tests, err := fromValues(valuesFile)
		return valuesFile, doc, tests, valuesFile + " (policyTests)", err
	case len(positional) == 0 || len(positional) > 2:
		return "", nil, nil, "", errors.New("check: give the policy file and, optionally, its tests (policy.json policy.tests.yaml), or -values values.yaml")
	}
	if doc, err = readInput(positional[0], stdin); err != nil {
		return "", nil, nil, "", fmt.Errorf("reading the policy: %w", err)
	}
	if len(positional) == 2 {
		if tests, err = os.ReadFile(positional[1]); err != nil {
			return "", nil, nil, "", fmt.Errorf("reading the tests: %w", err)
		}
		testsName = positional[1]
	}
	return positional[0], doc, tests, testsName, nil
}

// fromValues reads the chart's policy (as the chart writes it into the
// admin's ConfigMap: JSON) and policyTests from a Helm values file.
func fromValues(file string) (doc, tests []byte, err error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var vals struct {
		Policy      json.RawMessage `json:"policy"`
		PolicyTests *string         `json:"policyTests"`
	}
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(vals.Policy) == 0 || string(vals.Policy) == "null" {
		return nil, nil, fmt.Errorf("%s: no policy (the chart's default policy is in its values.yaml; give a values file that sets policy)", file)
	}
	if vals.PolicyTests != nil && *vals.PolicyTests != "" {
		tests = []byte(*vals.PolicyTests)
	}
	return vals.Policy, tests, nil
}
