// `ckpt sign` and `ckpt verify-signature`: OpenSSF Model Signing (OMS v1.0) bundles,
// written and checked by libconvert/sign/ (docs/ckpt-sign.md, docs/ckpt-verify-signature.md).
// Exit 0 signed / verified, 1 a verification failure (each finding names the rule and the
// file), 2 a usage mistake or refused key, 3 an I/O error.
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>

#include "../cli_common.h"
#include "commands.h"
#include "sign/oms_sign.h"
#include "report/signature_report.h"
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
  std::string provenance, reference;  // --provenance OUT.provenance --reference IN
  bool recompute = false;
  CommonFlags c;
};

// --json: the report, written whatever the outcome (a failed run's report says why).
ckpt::Outcome finish_report(const char* cmd, const CommonFlags& c, ckpt::SignatureReport& rep,
                            const ckpt::InputSet& inputs, ckpt::Outcome result) {
  rep.status = result;
  return ckpt::worse(result, emit(cmd, c.json, ckpt::signature_report_json(rep), inputs));
}

ckpt::Outcome run_sign(SignArgs& a) {
  if (a.o.output.empty()) a.o.output = ckpt::oms::default_bundle_path(a.o.model);
  if (a.o.output == "-" && a.c.json == "-") return usage_error(kSign, "-o - and --json - both write to stdout: choose one");
  ckpt::SignatureReport rep;
  rep.command = "sign";
  rep.model = a.o.model;
  rep.bundle = a.o.output;
  // The report never over the model or the key; the bundle may lie inside the model (below).
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.o.model);
  inputs.add_file(a.o.private_key);
  if (auto o = check_outputs(kSign, inputs, {a.c.json, "-"}); o != ckpt::Outcome::ok) return o;
  auto progress = std::make_shared<ckpt::Progress>(a.c.mode(), "sign");
  a.o.progress = [progress](uint64_t done, uint64_t total) { progress->update(done, total); };
  const ckpt::oms::SignResult r = ckpt::oms::sign_model(a.o);
  progress->finish();
  print_findings(kSign, r.findings);
  rep.findings = r.findings;
  rep.files = r.statement.resources.size();
  rep.bytes = r.bytes_hashed;
  if (r.usage) return finish_report(kSign, a.c, rep, inputs, ckpt::Outcome::usage);
  if (r.findings.has_errors())
    return finish_report(kSign, a.c, rep, inputs, ckpt::worse(ckpt::outcome_of(r.findings), ckpt::Outcome::findings));
  // The bundle may lie inside the model directory (it is excluded from what is signed),
  // but never over a file that was signed, a key or a certificate.
  ckpt::InputSet signed_files;
  for (const auto& p : r.files_read) signed_files.add_file(p);
  signed_files.add_file(a.o.private_key);
  if (!a.o.signing_cert.empty()) signed_files.add_file(a.o.signing_cert);
  for (const auto& p : a.o.cert_chain) signed_files.add_file(p);
  if (auto o = check_outputs(kSign, signed_files, {a.o.output}); o != ckpt::Outcome::ok)
    return finish_report(kSign, a.c, rep, inputs, o);
  const ckpt::Outcome written = emit(kSign, a.o.output, r.bundle_text, signed_files);
  rep.verified = written == ckpt::Outcome::ok;
  rep.method = a.o.signing_cert.empty() ? "key" : "certificate";
  rep.root_digest = r.statement.root_digest;
  if (written == ckpt::Outcome::ok && a.c.human() && a.o.output != "-")
    std::cout << "signed " << ckpt::display_escape(a.o.model) << ": " << r.statement.resources.size() << " files ("
              << r.bytes_hashed << " bytes), root digest " << r.statement.root_digest << " -> "
              << ckpt::display_escape(a.o.output) << "\n";
  return finish_report(kSign, a.c, rep, inputs, written);
}

// --provenance: OUT against its bundle, the provenance's signature, IN's digests recorded,
// OUT's digests its subject; --recompute: IN converted again gives OUT's digests.
void check_provenance(VerifyArgs& a, ckpt::SignatureReport& rep, bool& usage) {
  ckpt::ProvenanceSummary sum;
  sum.path = a.provenance;
  sum.reference = a.reference;
  sum.recompute = a.recompute;
  const ckpt::oms::ProvenanceResult r = ckpt::oms::verify_provenance({a.o, a.provenance, a.reference});
  rep.findings = r.findings;
  usage = r.usage;
  rep.method = r.output.method;
  rep.root_digest = r.output.root_digest;
  rep.files = r.output.files_checked;
  rep.bytes = r.output.bytes_hashed;
  rep.verified = r.verified;
  sum.read = r.read;
  sum.recorded = r.recorded;
  if (a.recompute && r.verified) {
    sum.reproduced = recompute_conversion(r.recorded, a.reference, a.o.model, rep.findings, usage);
    rep.verified = sum.reproduced;
  } else if (a.recompute) {
    rep.findings.error("PROVENANCE_NOT_RECOMPUTED", a.provenance, "", std::nullopt,
                       "--recompute: not converted again, the provenance did not verify (above)");
  }
  rep.provenance = sum;
}

ckpt::Outcome run_verify(VerifyArgs& a) {
  if (a.provenance.empty() && (!a.reference.empty() || a.recompute))
    return usage_error(kVerifySignature, "--reference and --recompute need --provenance OUT.provenance");
  if (!a.provenance.empty() && a.reference.empty())
    return usage_error(kVerifySignature, "--provenance needs --reference IN (the conversion's input)");
  if (a.o.bundle.empty())
    a.o.bundle = a.provenance.empty() ? ckpt::oms::default_bundle_path(a.o.model)
                                      : (std::filesystem::path(a.o.model) / ckpt::oms::kOutputBundleName).string();
  ckpt::SignatureReport rep;
  rep.command = "verify-signature";
  rep.model = a.o.model;
  rep.bundle = a.o.bundle;
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.o.model);
  inputs.add_file(a.o.bundle);
  inputs.add_file(a.provenance);
  if (!a.reference.empty()) inputs.add_checkpoint(a.reference);
  if (auto o = check_outputs(kVerifySignature, inputs, {a.c.json, "-"}); o != ckpt::Outcome::ok) return o;
  auto progress = std::make_shared<ckpt::Progress>(a.c.mode(), "verify-signature");
  a.o.progress = [progress](uint64_t done, uint64_t total) { progress->update(done, total); };
  bool usage = false;
  if (!a.provenance.empty()) {
    check_provenance(a, rep, usage);
  } else {
    const ckpt::oms::VerifyResult r = ckpt::oms::verify_signature(a.o);
    rep.findings = r.findings;
    usage = r.usage;
    rep.method = r.method;
    rep.root_digest = r.root_digest;
    rep.files = r.files_checked;
    rep.bytes = r.bytes_hashed;
    rep.verified = r.verified;
  }
  progress->finish();
  print_findings(kVerifySignature, rep.findings);
  if (usage) return finish_report(kVerifySignature, a.c, rep, inputs, ckpt::Outcome::usage);
  ckpt::Outcome o = ckpt::outcome_of(rep.findings);
  if (o == ckpt::Outcome::ok && !rep.verified) o = ckpt::Outcome::findings;  // never a silent pass
  if (o == ckpt::Outcome::ok && a.c.human()) {
    std::cout << "verified " << ckpt::display_escape(a.o.model) << ": " << rep.files << " signed files (" << rep.bytes
              << " bytes) match " << ckpt::display_escape(a.o.bundle) << " (" << rep.method << " method), root digest "
              << rep.root_digest << "\n";
    if (rep.provenance)
      std::cout << "provenance " << ckpt::display_escape(a.provenance) << " verifies: " << rep.provenance->recorded.command
                << " of " << ckpt::display_escape(a.reference) << " (root digest "
                << rep.provenance->recorded.input.root_digest << ", as recorded)"
                << (a.recompute ? ", converted again: the same digests" : "") << "\n";
  }
  return finish_report(kVerifySignature, a.c, rep, inputs, o);
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
  add_json(c.sub, args->c, "schemas/signature-report.schema.json");
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
  c.sub->add_option("--provenance", args->provenance,
                    "a conversion's provenance (OUT/model.provenance, written by --sign-key): check it too, with the "
                    "same trust (--bundle defaults to MODEL/model.sig); needs --reference");
  c.sub->add_option("--reference", args->reference,
                    "with --provenance: the conversion's input IN, rehashed: its digests must be the recorded ones");
  c.sub->add_flag("--recompute", args->recompute,
                  "with --provenance: convert IN again with the recorded options (in a temporary directory beside "
                  "MODEL, removed afterwards): the digests must be MODEL's");
  add_common(c.sub, args->c, "errors only: no progress, no 'verified' line");
  add_json(c.sub, args->c, "schemas/signature-report.schema.json");
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

ckpt::Outcome check_signature_into(const SignatureFlags& flags, const std::string& model, ckpt::Findings& findings,
                                   const std::map<std::string, std::string>& hashed) {
  if (!flags.complete())
    return usage_error("ckpt validate", "--signature BUNDLE needs --public-key PUB.pem or --cert-chain CA.pem (and "
                                        "they need --signature)");
  ckpt::oms::VerifyOptions o;
  o.model = model;
  o.bundle = flags.bundle;
  o.public_key = flags.public_key;
  o.cert_chain = flags.cert_chain;
  o.known_sha256 = hashed;
  const ckpt::oms::VerifyResult r = ckpt::oms::verify_signature(o);
  if (r.usage) {
    print_findings("ckpt validate", r.findings);
    return ckpt::Outcome::usage;
  }
  findings.append(r.findings);
  if (r.verified)
    findings.info("OMS_VERIFIED", flags.bundle, "", std::nullopt,
                  "the OMS signature verifies (" + r.method + " method): " + std::to_string(r.files_checked) +
                      " signed files match" +
                      (r.files_known ? " (" + std::to_string(r.files_known) + " hashed in the --deep pass)" : "") +
                      ", root digest " + r.root_digest);
  else if (!r.findings.has_errors())
    findings.error("OMS_NOT_VERIFIED", flags.bundle, "", std::nullopt, "the OMS signature was not verified");
  return ckpt::Outcome::ok;
}

namespace {
ckpt::oms::VerifyOptions verify_options(const SignatureFlags& flags, const std::string& model) {
  ckpt::oms::VerifyOptions o;
  o.model = model;
  o.bundle = flags.bundle;
  o.public_key = flags.public_key;
  o.cert_chain = flags.cert_chain;
  return o;
}
}  // namespace

bool check_signature_bundle(const SignatureFlags& flags, std::optional<ckpt::oms::VerifiedBundle>& verified,
                            ckpt::Findings& findings, bool& usage) {
  ckpt::oms::VerifyResult r;
  ckpt::oms::verify_bundle(verify_options(flags, ""), r);
  findings.append(r.findings);
  usage = r.usage;
  verified = ckpt::oms::verified_bundle(r);
  return verified.has_value();
}

bool check_signature_of_conversion(const SignatureFlags& flags, const ckpt::oms::VerifiedBundle& verified,
                                   const std::string& model, const std::vector<ckpt::HashedFile>& read,
                                   ckpt::Findings& findings, bool& usage) {
  ckpt::oms::VerifyOptions o = verify_options(flags, model);
  for (const auto& h : read)
    if (h.error.empty()) o.known_sha256.emplace(h.name, h.sha256);
  const ckpt::oms::VerifyResult r = ckpt::oms::verify_files(o, verified);
  findings.append(r.findings);
  usage = r.usage;
  if (r.verified)
    findings.info("OMS_VERIFIED", flags.bundle, "", std::nullopt,
                  "the input's OMS signature verifies (" + r.method + " method): " + std::to_string(r.files_checked) +
                      " signed files match (" + std::to_string(r.files_known) +
                      " hashed in the conversion's own pass over the input, the others read here), root digest " +
                      r.root_digest);
  return r.verified;
}

}  // namespace ckptcli
