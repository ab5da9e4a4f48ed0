// `ckpt sign` and `ckpt verify-signature`: OpenSSF Model Signing (OMS v1.0) bundles,
// written and checked by libconvert/sign/ (docs/ckpt-sign.md, docs/ckpt-verify-signature.md).
// Exit 0 signed / verified, 1 a verification failure (each finding names the rule and the
// file), 2 a usage mistake or refused key, 3 an I/O error.
#include <future>
#include <iostream>
#include <memory>

#include "../cli_common.h"
#include "commands.h"
#include "sign/oms_sign.h"
#include "sign/oms_verify.h"

namespace ckptcli {
namespace {

constexpr const char* kSign = "ckpt sign";
constexpr const char* kVerifySignature = "ckpt verify-signature";

struct SignArgs {
  ckpt::oms::SignOptions o;
  CommonFlags c;
};

struct VerifyArgs {
  ckpt::oms::VerifyOptions o;
  CommonFlags c;
};

ckpt::Outcome run_sign(SignArgs& a) {
  if (a.o.output.empty()) a.o.output = ckpt::oms::default_bundle_path(a.o.model);
  auto progress = std::make_shared<ckpt::Progress>(a.c.mode(), "sign");
  a.o.progress = [progress](uint64_t done, uint64_t total) { progress->update(done, total); };
  const ckpt::oms::SignResult r = ckpt::oms::sign_model(a.o);
  progress->finish();
  print_findings(kSign, r.findings);
  if (r.usage) return ckpt::Outcome::usage;
  if (r.findings.has_errors()) return ckpt::worse(ckpt::outcome_of(r.findings), ckpt::Outcome::findings);
  // The bundle may lie inside the model directory (it is excluded from what is signed),
  // but never over a file that was signed, a key or a certificate.
  ckpt::InputSet inputs;
  for (const auto& p : r.files_read) inputs.add_file(p);
  inputs.add_file(a.o.private_key);
  if (!a.o.signing_cert.empty()) inputs.add_file(a.o.signing_cert);
  for (const auto& p : a.o.cert_chain) inputs.add_file(p);
  if (auto o = check_outputs(kSign, inputs, {a.o.output}); o != ckpt::Outcome::ok) return o;
  const ckpt::Outcome written = emit(kSign, a.o.output, r.bundle_text, inputs);
  if (written == ckpt::Outcome::ok && a.c.human() && a.o.output != "-")
    std::cout << "signed " << ckpt::display_escape(a.o.model) << ": " << r.statement.resources.size() << " files ("
              << r.bytes_hashed << " bytes), root digest " << r.statement.root_digest << " -> "
              << ckpt::display_escape(a.o.output) << "\n";
  return written;
}

ckpt::Outcome run_verify(VerifyArgs& a) {
  if (a.o.bundle.empty()) a.o.bundle = ckpt::oms::default_bundle_path(a.o.model);
  auto progress = std::make_shared<ckpt::Progress>(a.c.mode(), "verify-signature");
  a.o.progress = [progress](uint64_t done, uint64_t total) { progress->update(done, total); };
  const ckpt::oms::VerifyResult r = ckpt::oms::verify_signature(a.o);
  progress->finish();
  print_findings(kVerifySignature, r.findings);
  if (r.usage) return ckpt::Outcome::usage;
  const ckpt::Outcome o = ckpt::outcome_of(r.findings);
  if (o == ckpt::Outcome::ok && !r.verified) return ckpt::Outcome::findings;  // never a silent pass
  if (o == ckpt::Outcome::ok && a.c.human())
    std::cout << "verified " << ckpt::display_escape(a.o.model) << ": " << r.files_checked << " signed files ("
              << r.bytes_hashed << " bytes) match " << ckpt::display_escape(a.o.bundle) << " (" << r.method
              << " method), root digest " << r.root_digest << "\n";
  return o;
}

}  // namespace

Command add_sign_command(CLI::App& app) {
  auto args = std::make_shared<SignArgs>();
  Command c;
  c.name = kSign;
  c.sub = app.add_subcommand("sign", "Sign a model: an OpenSSF Model Signing (OMS v1.0) bundle, key or certificate method");
  c.sub->add_option("model", args->o.model, "model directory or single file")->required();
  c.sub->add_option("--private-key", args->o.private_key, "PEM EC private key (P-256, P-384 or P-521), unencrypted")
      ->required();
  c.sub->add_option("--signing-cert", args->o.signing_cert,
                    "PEM certificate of the private key: the certificate method (the bundle carries it)");
  c.sub->add_option("--cert-chain", args->o.cert_chain,
                    "PEM certificate(s) of the signing certificate's chain, leaf to root (repeatable; needs "
                    "--signing-cert)");
  c.sub->add_option("--ignore-paths", args->o.ignore_paths,
                    "a path to leave out of the signature, relative to MODEL or absolute inside it (repeatable; "
                    ".git, .gitignore, .gitattributes, .github always are)");
  c.sub->add_option("-o,--output", args->o.output,
                    "the bundle to write, atomically (default: model.sig in the directory holding MODEL)");
  add_common(c.sub, args->c, "errors only: no progress, no 'signed' line");
  c.run = [args] { return run_sign(*args); };
  return c;
}

Command add_verify_signature_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  Command c;
  c.name = kVerifySignature;
  c.sub = app.add_subcommand("verify-signature", "Verify a model against its OMS signature bundle (key or certificate method)");
  c.sub->add_option("model", args->o.model, "model directory or single file")->required();
  c.sub->add_option("--bundle", args->o.bundle, "the OMS bundle (default: model.sig in the directory holding MODEL)");
  auto* key = c.sub->add_option("--public-key", args->o.public_key, "PEM EC public key: the key method");
  auto* chain = c.sub->add_option("--cert-chain", args->o.cert_chain,
                                  "PEM CA certificate(s) to trust: the certificate method (repeatable; the bundle's "
                                  "signing certificate must chain to one and be valid now)");
  key->excludes(chain);
  c.sub->add_option("--ignore-paths", args->o.ignore_paths,
                    "a path whose files need not be signed, relative to MODEL or absolute inside it (repeatable; "
                    "added to the bundle's own ignore paths)");
  c.sub->add_flag("--ignore-unsigned-files", args->o.ignore_unsigned_files,
                  "files the bundle does not list are allowed (every listed file is still checked)");
  add_common(c.sub, args->c, "errors only: no progress, no 'verified' line");
  c.run = [args] { return run_verify(*args); };
  return c;
}

void add_signature_options(CLI::App* sub, SignatureFlags& flags, const std::string& bundle_option) {
  sub->add_option(bundle_option, flags.bundle,
                  bundle_option == "--signature"
                      ? "also verify PATH against this OMS signature bundle (as ckpt verify-signature does)"
                      : "verify the input against this OMS signature bundle while converting; OUT is not finalized "
                        "(no index, no config.json) unless it verifies");
  auto* key = sub->add_option("--public-key", flags.public_key, "with " + bundle_option + ": PEM EC public key (key method)");
  auto* chain = sub->add_option("--cert-chain", flags.cert_chain,
                                "with " + bundle_option + ": PEM CA certificate(s) to trust (certificate method; repeatable)");
  key->excludes(chain);
}

ckpt::Outcome check_signature_into(const SignatureFlags& flags, const std::string& model, ckpt::Findings& findings) {
  if (!flags.complete())
    return usage_error("ckpt validate", "--signature BUNDLE needs --public-key PUB.pem or --cert-chain CA.pem (and "
                                        "they need --signature)");
  ckpt::oms::VerifyOptions o;
  o.model = model;
  o.bundle = flags.bundle;
  o.public_key = flags.public_key;
  o.cert_chain = flags.cert_chain;
  const ckpt::oms::VerifyResult r = ckpt::oms::verify_signature(o);
  if (r.usage) {
    print_findings("ckpt validate", r.findings);
    return ckpt::Outcome::usage;
  }
  findings.append(r.findings);
  if (r.verified)
    findings.info("OMS_VERIFIED", flags.bundle, "", std::nullopt,
                  "the OMS signature verifies (" + r.method + " method): " + std::to_string(r.files_checked) +
                      " signed files match, root digest " + r.root_digest);
  else if (!r.findings.has_errors())
    findings.error("OMS_NOT_VERIFIED", flags.bundle, "", std::nullopt, "the OMS signature was not verified");
  return ckpt::Outcome::ok;
}

std::function<bool(ckpt::Findings&, bool& usage)> start_signature_check(const SignatureFlags& flags,
                                                                        const std::string& model) {
  ckpt::oms::VerifyOptions o;
  o.model = model;
  o.bundle = flags.bundle;
  o.public_key = flags.public_key;
  o.cert_chain = flags.cert_chain;
  auto check = std::make_shared<std::future<ckpt::oms::VerifyResult>>(
      std::async(std::launch::async, [o] { return ckpt::oms::verify_signature(o); }));
  return [check, bundle = flags.bundle](ckpt::Findings& findings, bool& usage) {
    const ckpt::oms::VerifyResult r = check->get();
    findings.append(r.findings);
    usage = r.usage;
    if (r.verified)
      findings.info("OMS_VERIFIED", bundle, "", std::nullopt,
                    "the input's OMS signature verifies (" + r.method + " method): " + std::to_string(r.files_checked) +
                        " signed files match, root digest " + r.root_digest);
    return r.verified;
  };
}

}  // namespace ckptcli
