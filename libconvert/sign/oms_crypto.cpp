// OpenSSL behind sign/oms_crypto.h: Base64, DSSE PAE, EC keys, certificates, chains.
#include "sign/oms_crypto.h"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>

#include <array>

#include "io/hash.h"

namespace ckpt::oms {

struct KeyHandle {
  EVP_PKEY* key = nullptr;
  explicit KeyHandle(EVP_PKEY* k) : key(k) {}
  ~KeyHandle() { EVP_PKEY_free(key); }
  KeyHandle(const KeyHandle&) = delete;
  KeyHandle& operator=(const KeyHandle&) = delete;
};

struct CertHandle {
  X509* cert = nullptr;
  explicit CertHandle(X509* c) : cert(c) {}
  ~CertHandle() { X509_free(cert); }
  CertHandle(const CertHandle&) = delete;
  CertHandle& operator=(const CertHandle&) = delete;
};

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// OpenSSL's queued error text (the most recent), or `fallback`; the queue is cleared so
// a later call starts clean.
std::string openssl_error(const std::string& fallback) {
  const unsigned long e = ERR_peek_last_error();
  std::string text = fallback;
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    text += " (" + std::string(buf) + ")";
  }
  ERR_clear_error();
  return text;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

Bio read_bio(std::string_view text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(std::min<size_t>(text.size(), 1u << 30))));
}

// A passphrase callback that gives none: an encrypted key is refused, never prompted for.
int no_passphrase(char*, int, int, void*) { return -1; }

int b64_value(char c, bool url) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == (url ? '-' : '+')) return 62;
  if (c == (url ? '_' : '/')) return 63;
  return -1;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) |
                       uint32_t(uint8_t(bytes[i + 2]));
    for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += rest == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string& bytes, std::string& error) {
  bytes.clear();
  size_t len = text.size();
  size_t pad = 0;
  while (len > 0 && text[len - 1] == '=' && pad < 2) --len, ++pad;
  if (pad > 0 && text.size() % 4 != 0) {
    error = "Base64 padding does not complete a 4-character group";
    return false;
  }
  if (len % 4 == 1) {
    error = "Base64 text of " + std::to_string(text.size()) + " characters cannot be complete";
    return false;
  }
  const bool url = text.find_first_of("-_") != std::string_view::npos;
  bytes.reserve(len / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < len; ++i) {
    const int v = b64_value(text[i], url);
    if (v < 0) {
      error = "character " + std::to_string(i) + " is not Base64";
      return false;
    }
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) {
    error = "Base64 text has bits set after its last byte (not canonical)";
    return false;
  }
  return true;
}

std::string dsse_pae(std::string_view payload_type, std::string_view payload) {
  std::string out = "DSSEv1 ";
  out += std::to_string(payload_type.size());
  out += ' ';
  out += payload_type;
  out += ' ';
  out += std::to_string(payload.size());
  out += ' ';
  out += payload;
  return out;
}

bool EcKey::accept(std::shared_ptr<KeyHandle> key, std::string& error) {
  if (EVP_PKEY_get_base_id(key->key) != EVP_PKEY_EC) {
    error = "the key is not an EC key (OMS keys here: EC P-256, P-384 or P-521)";
    return false;
  }
  char group[64] = {};
  size_t n = 0;
  if (EVP_PKEY_get_utf8_string_param(key->key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &n) != 1) {
    error = openssl_error("the EC key names no curve");
    return false;
  }
  const std::string name(group, n);
  if (name == "prime256v1" || name == "P-256") {
    curve_ = "P-256", digest_ = "SHA256";
  } else if (name == "secp384r1" || name == "P-384") {
    curve_ = "P-384", digest_ = "SHA384";
  } else if (name == "secp521r1" || name == "P-521") {
    curve_ = "P-521", digest_ = "SHA512";
  } else {
    error = "the EC key is on curve " + name + "; OMS keys here are P-256, P-384 or P-521";
    return false;
  }
  key_ = std::move(key);
  return true;
}

bool EcKey::load_public_pem(std::string_view pem, std::string& error) {
  Bio bio = read_bio(pem);
  EVP_PKEY* k = bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, no_passphrase, nullptr) : nullptr;
  if (k == nullptr) {
    error = openssl_error("not a PEM public key (-----BEGIN PUBLIC KEY-----)");
    return false;
  }
  return accept(std::make_shared<KeyHandle>(k), error);
}

bool EcKey::load_private_pem(std::string_view pem, std::string& error) {
  Bio bio = read_bio(pem);
  EVP_PKEY* k = bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr) : nullptr;
  if (k == nullptr) {
    error = openssl_error("not an unencrypted PEM private key");
    return false;
  }
  return accept(std::make_shared<KeyHandle>(k), error);
}

bool EcKey::load_from_certificate(const CertHandle& cert, std::string& error) {
  EVP_PKEY* k = X509_get_pubkey(cert.cert);
  if (k == nullptr) {
    error = openssl_error("the certificate's public key cannot be read");
    return false;
  }
  return accept(std::make_shared<KeyHandle>(k), error);
}

std::string EcKey::public_pem() const {
  if (!key_) return {};
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), key_->key) != 1) return {};
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

std::string EcKey::hint() const { return sha256_hex(public_pem()); }

bool EcKey::sign(std::string_view message, std::string& signature, std::string& error) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  size_t n = 0;
  const auto* msg = reinterpret_cast<const unsigned char*>(message.data());
  if (!ctx || EVP_DigestSignInit_ex(ctx.get(), nullptr, digest_.c_str(), nullptr, nullptr, key_->key, nullptr) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &n, msg, message.size()) != 1) {
    error = openssl_error("cannot sign with the key");
    return false;
  }
  signature.assign(n, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &n, msg, message.size()) != 1) {
    error = openssl_error("cannot sign with the key");
    return false;
  }
  signature.resize(n);
  return true;
}

bool EcKey::verify(std::string_view message, std::string_view signature) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  const bool ok =
      ctx && key_ &&
      EVP_DigestVerifyInit_ex(ctx.get(), nullptr, digest_.c_str(), nullptr, nullptr, key_->key, nullptr) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                       reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  ERR_clear_error();
  return ok;
}

bool Certificate::load_der(std::string_view der, std::string& error) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  if (der.size() > (1u << 24)) {
    error = "a certificate of " + std::to_string(der.size()) + " bytes (more than 16 MiB) is refused";
    return false;
  }
  X509* c = d2i_X509(nullptr, &p, static_cast<long>(der.size()));
  if (c == nullptr) {
    error = openssl_error("not a DER X.509 certificate");
    return false;
  }
  cert_ = std::make_shared<CertHandle>(c);
  if (p != reinterpret_cast<const unsigned char*>(der.data()) + der.size()) {
    error = "bytes follow the DER certificate";
    cert_.reset();
    return false;
  }
  return true;
}

std::string Certificate::der() const {
  unsigned char* out = nullptr;
  const int n = cert_ ? i2d_X509(cert_->cert, &out) : -1;
  if (n <= 0) return {};
  std::string s(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  OPENSSL_free(out);
  return s;
}

std::string Certificate::subject() const {
  if (!cert_) return {};
  char buf[512];
  X509_NAME_oneline(X509_get_subject_name(cert_->cert), buf, sizeof buf);
  return buf;
}

bool Certificate::matches(const EcKey& key) const {
  const auto h = key.handle();
  const bool ok = cert_ && h && EVP_PKEY_eq(X509_get0_pubkey(cert_->cert), h->key) == 1;
  ERR_clear_error();
  return ok;
}

bool Certificate::may_sign() const {
  if (!cert_) return false;
  const uint32_t flags = X509_get_extension_flags(cert_->cert);
  const bool ku = (flags & EXFLAG_KUSAGE) != 0 && (X509_get_key_usage(cert_->cert) & KU_DIGITAL_SIGNATURE) != 0;
  const bool xku = (flags & EXFLAG_XKUSAGE) != 0 && (X509_get_extended_key_usage(cert_->cert) & XKU_CODE_SIGN) != 0;
  return ku || xku;
}

bool load_certificates_pem(std::string_view pem, std::vector<Certificate>& out, std::string& error) {
  out.clear();
  Bio bio = read_bio(pem);
  while (bio) {
    X509* c = PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr);
    if (c == nullptr) break;
    Certificate cert;
    unsigned char* der = nullptr;
    const int n = i2d_X509(c, &der);
    X509_free(c);
    if (n <= 0) break;
    const bool ok = cert.load_der(std::string_view(reinterpret_cast<char*>(der), static_cast<size_t>(n)), error);
    OPENSSL_free(der);
    if (!ok) return false;
    out.push_back(std::move(cert));
  }
  const unsigned long e = ERR_peek_last_error();
  const bool clean_end = e == 0 || ERR_GET_REASON(e) == PEM_R_NO_START_LINE;
  if (!clean_end || out.empty()) {
    error = openssl_error("no PEM certificate (-----BEGIN CERTIFICATE-----) could be read");
    out.clear();
    return false;
  }
  ERR_clear_error();
  return true;
}

bool verify_certificate_chain(const Certificate& leaf, const std::vector<Certificate>& intermediates,
                              const std::vector<Certificate>& anchors, std::string& error) {
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  auto free_stack = [](STACK_OF(X509) * s) { sk_X509_free(s); };
  std::unique_ptr<STACK_OF(X509), decltype(free_stack)> untrusted(sk_X509_new_null(), free_stack);
  if (!store || !ctx || !untrusted || !leaf.handle()) {
    error = openssl_error("cannot set up the certificate check");
    return false;
  }
  for (const auto& a : anchors)
    if (X509_STORE_add_cert(store.get(), a.handle()->cert) != 1) ERR_clear_error();  // a duplicate anchor
  // An anchor given on the command line is trusted as given, an intermediate CA too.
  X509_STORE_set_flags(store.get(), X509_V_FLAG_PARTIAL_CHAIN);
  for (const auto& c : intermediates) sk_X509_push(untrusted.get(), c.handle()->cert);
  if (X509_STORE_CTX_init(ctx.get(), store.get(), leaf.handle()->cert, untrusted.get()) != 1) {
    error = openssl_error("cannot set up the certificate check");
    return false;
  }
  if (X509_verify_cert(ctx.get()) == 1) {
    ERR_clear_error();
    return true;
  }
  const int code = X509_STORE_CTX_get_error(ctx.get());
  const int depth = X509_STORE_CTX_get_error_depth(ctx.get());
  X509* at = X509_STORE_CTX_get_current_cert(ctx.get());
  char name[512] = "?";
  if (at != nullptr) X509_NAME_oneline(X509_get_subject_name(at), name, sizeof name);
  error = std::string(X509_verify_cert_error_string(code)) + " (certificate " + name + ", depth " +
          std::to_string(depth) + " of the chain from the signing certificate)";
  ERR_clear_error();
  return false;
}

}  // namespace ckpt::oms
