// The cryptography an OMS bundle needs, on OpenSSL (docs/ckpt-sign.md): strict Base64,
// the DSSE pre-authentication encoding, EC keys (P-256, P-384, P-521 only; each signs
// with its own hash: SHA-256, SHA-384, SHA-512, as the reference clients do), X.509
// certificates and the chain check of the `certificate` method. OpenSSL types stay out of
// this header; a key or certificate is held by a shared handle.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::oms {

// RFC 4648 Base64, standard alphabet, with '=' padding.
std::string base64_encode(std::string_view bytes);
// Strict decoding: the standard alphabet (or the URL-safe one, never mixed), padding
// optional but correct when present, no whitespace, no non-zero bits after the last
// byte. False (with `error`) otherwise.
bool base64_decode(std::string_view text, std::string& bytes, std::string& error);

// DSSE v1 PAE: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body (lengths in ASCII decimal).
std::string dsse_pae(std::string_view payload_type, std::string_view payload);

struct KeyHandle;
struct CertHandle;

// An EC key (public, or a private key with its public half) on one of the three curves.
class EcKey {
 public:
  // Loads a PEM public key ("BEGIN PUBLIC KEY") or a PEM private key (PKCS#8 or
  // "BEGIN EC PRIVATE KEY", not encrypted). False with `error` for anything else, a
  // key that is not EC, or a curve other than P-256/P-384/P-521.
  bool load_public_pem(std::string_view pem, std::string& error);
  bool load_private_pem(std::string_view pem, std::string& error);
  // The SubjectPublicKeyInfo DER of a certificate's key (same curve rule).
  bool load_from_certificate(const CertHandle& cert, std::string& error);
  bool empty() const { return !key_; }
  // "P-384"
  const std::string& curve() const { return curve_; }
  // The public key as PEM ("-----BEGIN PUBLIC KEY-----\n...") and its SHA-256 in hex:
  // the `publicKey.hint` the reference clients write.
  std::string public_pem() const;
  std::string hint() const;
  // ECDSA (DER signature) over `message` with the curve's hash.
  bool sign(std::string_view message, std::string& signature, std::string& error) const;
  bool verify(std::string_view message, std::string_view signature) const;
  std::shared_ptr<KeyHandle> handle() const { return key_; }

 private:
  bool accept(std::shared_ptr<KeyHandle> key, std::string& error);
  std::shared_ptr<KeyHandle> key_;
  std::string curve_;
  std::string digest_;  // "SHA256", "SHA384", "SHA512"
};

// One X.509 certificate.
class Certificate {
 public:
  bool load_der(std::string_view der, std::string& error);
  std::string der() const;
  std::string subject() const;  // one line, for messages
  std::shared_ptr<CertHandle> handle() const { return cert_; }
  // True when this certificate holds the public half of `key`.
  bool matches(const EcKey& key) const;
  // True when it may sign: its key usage has digitalSignature, or its extended key usage
  // has codeSigning (the reference verifier's rule).
  bool may_sign() const;

 private:
  std::shared_ptr<CertHandle> cert_;
};

// Every certificate of a PEM file ("BEGIN CERTIFICATE" blocks); at least one, else false.
bool load_certificates_pem(std::string_view pem, std::vector<Certificate>& out, std::string& error);

// The `certificate` method's chain rule: `leaf` (with the bundle's other certificates as
// untrusted intermediates) must chain to one of `anchors` (trusted as given, an
// intermediate too), every certificate within its validity period now. False with
// OpenSSL's reason and the depth it failed at.
bool verify_certificate_chain(const Certificate& leaf, const std::vector<Certificate>& intermediates,
                              const std::vector<Certificate>& anchors, std::string& error);

}  // namespace ckpt::oms
