// hmac_sha256_unit_test.cpp - SHA-256 and HMAC-SHA-256 of server/src/security
// against the published test vectors: FIPS 180-2 (appendix B) for the hash,
// RFC 4231 (section 4) for the HMAC; the lengths around a block's padding
// boundary against Python's hashlib; and the constant-time comparison.
#include <doctest/doctest.h>

#include <string>

#include "security/hmac_sha256.hpp"
#include "security/sha256.hpp"

namespace {

using delayq::server::hmac_sha256;
using delayq::server::sha256;
using delayq::server::to_hex;

std::string sha_hex(const std::string& s) { return to_hex(sha256::of(s)); }
std::string hmac_hex(const std::string& key, const std::string& data) {
  return to_hex(hmac_sha256(key, data));
}

}  // namespace

TEST_CASE("sha256: the FIPS 180-2 vectors and the empty message") {
  CHECK(sha_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha_hex(std::string(1'000'000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(sha_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("sha256: lengths around the padding boundary, whole or in pieces") {
  // 55 bytes leave room for the length in the last block, 56 do not.
  const std::pair<std::size_t, const char*> known[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"}};
  for (const auto& [n, hex] : known) {
    CAPTURE(n);
    const std::string msg(n, 'a');
    CHECK(sha_hex(msg) == hex);
    // Byte by byte, and in pieces of 7 that straddle the blocks.
    sha256 bytes, pieces;
    for (const char c : msg) bytes.update(std::string_view(&c, 1));
    for (std::size_t at = 0; at < n; at += 7) pieces.update(std::string_view(msg).substr(at, 7));
    CHECK(to_hex(bytes.finish()) == hex);
    CHECK(to_hex(pieces.finish()) == hex);
  }
  // finish() starts over.
  sha256 h;
  h.update("zzz");
  (void)h.finish();
  CHECK(to_hex(h.update("abc").finish()) == sha_hex("abc"));
}

TEST_CASE("hmac-sha256: the RFC 4231 vectors") {
  // 1: a 20-byte key.
  CHECK(hmac_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // 2: a key shorter than the output.
  CHECK(hmac_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // 3 and 4: 50 bytes of data.
  CHECK(hmac_hex(std::string(20, '\xaa'), std::string(50, '\xdd')) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (char c = 1; c <= 25; ++c) key4 += c;
  CHECK(hmac_hex(key4, std::string(50, '\xcd')) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // 5: truncated to 128 bits.
  CHECK(hmac_hex(std::string(20, '\x0c'), "Test With Truncation").substr(0, 32) ==
        "a3b6167473100ee06e0c796c2955552b");
  // 6 and 7: a key longer than a block is hashed first.
  CHECK(hmac_hex(std::string(131, '\xaa'),
                 "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(hmac_hex(std::string(131, '\xaa'),
                 "This is a test using a larger than block-size key and a larger than block-size "
                 "data. The key needs to be hashed before being used by the HMAC algorithm.") ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  // A key of exactly a block is used as it is; one byte more is hashed
  // (against Python's hmac).
  CHECK(hmac_hex(std::string(64, 'k'), "m") ==
        "3b7a8d453e76edb519238a515105a57508d0f169f480ebeee120a9e7803289fa");
  CHECK(hmac_hex(std::string(65, 'k'), "m") ==
        "c2d7d4c2256ddb097409ec0c67e1d58fa1a007fc6932cac0d892a525d08af7cc");
}

TEST_CASE("constant-time compare: equal only when every byte is") {
  using delayq::server::constant_time_equal;
  CHECK(constant_time_equal("", ""));
  CHECK(constant_time_equal("abc", "abc"));
  CHECK_FALSE(constant_time_equal("abc", "abd"));
  CHECK_FALSE(constant_time_equal("abc", "xbc"));
  CHECK_FALSE(constant_time_equal("abc", "ab"));
  CHECK_FALSE(constant_time_equal("", "a"));
  CHECK_FALSE(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}
