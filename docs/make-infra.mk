# --- infrastructure (AWS CDK app in infra/) ----------------------------------------------
# Synth needs no AWS credentials, no Docker and no CDK CLI; the layer needs PyPI only.
INFRA_PYTHON ?= .venv/bin/python
CDK_OUTDIR ?= cdk.out

.PHONY: layer layer-rebuild synth infra-test

layer: ## Build the dependency layer into build/layer (arm64, Python 3.13); reused while current
	$(INFRA_PYTHON) -m infra.layer

layer-rebuild: ## Rebuild build/layer from scratch
	$(INFRA_PYTHON) -m infra.layer --force

synth: layer ## Synthesize the stack into $(CDK_OUTDIR) (runs cdk-nag; fails on a finding)
	CDK_OUTDIR=$(CDK_OUTDIR) $(INFRA_PYTHON) -m infra.app
	@echo "template: $(CDK_OUTDIR)/Reminders.template.json"

infra-test: ## CDK assertions, cdk-nag, cfn-lint and the layer's wheel tags
	$(INFRA_PYTHON) -m pytest tests/infra -q
