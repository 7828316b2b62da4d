#include "runtime/node/perplexity_command.hpp"

#include "core/cli/program.hpp"
#include "core/gateway/perplexity.hpp"
#include "core/text/number.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using json = nlohmann::json;

/// A failure to report (exit 1).
struct failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct endpoint {
  std::string host, port, base; ///< base: the path before /v1/...
};

/// "http://HOST:PORT[/PATH]" (an https URL is refused by name).
endpoint parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    throw std::invalid_argument("--url: this client speaks plain HTTP (a "
                                "gateway on loopback); not " + url);
  if (url.rfind(scheme, 0) != 0)
    throw std::invalid_argument("--url must start with http://, not '" + url
                                + "'");
  auto rest = url.substr(scheme.size());
  auto slash = rest.find('/');
  auto hostport = rest.substr(0, slash);
  endpoint e;
  e.base = slash == std::string::npos ? "" : rest.substr(slash);
  while (!e.base.empty() && e.base.back() == '/')
    e.base.pop_back();
  if (e.base.size() >= 3 && e.base.compare(e.base.size() - 3, 3, "/v1") == 0)
    e.base.resize(e.base.size() - 3);
  auto colon = hostport.rfind(':');
  if (colon == std::string::npos || colon == 0
      || colon + 1 == hostport.size())
    throw std::invalid_argument("--url needs a host and a port "
                                "(http://127.0.0.1:8080), not '" + url + "'");
  e.host = hostport.substr(0, colon);
  e.port = hostport.substr(colon + 1);
  text::parse_integer<std::uint64_t>(e.port, 1, 65535, "--url's port");
  return e;
}

/// POSTs `body` as JSON to `path`; the answer's body (status 200) or a
/// failure naming the gateway's error.
json post(const endpoint& e, const std::string& path, const json& body,
          const std::string& api_key) {
  try {
    net::io_context ioc;
    tcp::resolver resolver{ioc};
    beast::tcp_stream stream{ioc};
    stream.expires_after(std::chrono::minutes(30));
    stream.connect(resolver.resolve(e.host, e.port));
    http::request<http::string_body> req{http::verb::post, e.base + path, 11};
    req.set(http::field::host, e.host);
    req.set(http::field::content_type, "application/json");
    if (!api_key.empty())
      req.set(http::field::authorization, "Bearer " + api_key);
    req.body() = body.dump();
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::uint64_t{1} << 31);
    http::read(stream, buffer, parser);
    auto& res = parser.get();
    json answer = json::parse(res.body(), nullptr, false);
    if (res.result_int() != 200) {
      std::string why = answer.is_object() && answer.contains("error")
                          ? answer["error"].value("message", res.body())
                          : res.body();
      throw failed(path + ": HTTP " + std::to_string(res.result_int())
                   + ": " + why);
    }
    if (answer.is_discarded())
      throw failed(path + ": the answer is not JSON");
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return answer;
  } catch (const beast::system_error& x) {
    throw failed(e.host + ":" + e.port + path + ": " + x.code().message());
  }
}

/// The ids of /tokenize's answer.
std::vector<std::int32_t> ids_of(const json& answer) {
  std::vector<std::int32_t> ids;
  for (auto& t : answer.at("tokens"))
    ids.push_back(t.get<std::int32_t>());
  return ids;
}

} // namespace

int run_perplexity_command(int argc, char** argv, std::ostream& out,
                           std::ostream& err) {
  std::string url, model, file, api_key, ctx_s = "512", chunks_s = "0",
                                          batch_s = "4";
  CLI::App app{"Measures a served model's perplexity on a text, as "
               "llama.cpp's llama-perplexity does, through its OpenAI "
               "gateway.",
               "exo-node perplexity"};
  cli::configure(app);
  app.add_option("--url", url, "the gateway (http://127.0.0.1:8080)")
    ->type_name("URL")
    ->required();
  app.add_option("--model", model, "the served model's id")
    ->type_name("ID")
    ->required();
  app.add_option("--file", file, "the text (UTF-8)")
    ->type_name("FILE")
    ->required();
  app.add_option("--ctx", ctx_s, "tokens a chunk (512, llama.cpp's)")
    ->type_name("N");
  app.add_option("--chunks", chunks_s, "chunks to read at most (0: all)")
    ->type_name("N");
  app.add_option("--batch", batch_s,
                 "chunks in one request (4; each is a job of its own)")
    ->type_name("N");
  app.add_option("--api-key", api_key, "the gateway's bearer token")
    ->type_name("KEY");
  app.footer("Exit status: 0 after the estimate, 2 on bad arguments, 1 when "
             "the text is too short or the gateway refuses.");
  if (auto code = cli::parse(app, argc, argv, out, err,
                             "exo-node perplexity: "))
    return *code;
  endpoint ep;
  std::uint32_t ctx = 0;
  std::size_t max_chunks = 0, batch = 0;
  try {
    ep = parse_url(url);
    ctx = static_cast<std::uint32_t>(
      text::parse_integer<std::uint64_t>(ctx_s, 8, 1 << 20, "--ctx"));
    max_chunks = static_cast<std::size_t>(
      text::parse_integer<std::uint64_t>(chunks_s, 0, 1 << 30, "--chunks"));
    batch = static_cast<std::size_t>(
      text::parse_integer<std::uint64_t>(batch_s, 1, 64, "--batch"));
  } catch (const std::exception& e) {
    err << "exo-node perplexity: " << e.what() << "\n";
    return 2;
  }
  try {
    std::ifstream in{file, std::ios::binary};
    if (!in)
      throw failed("cannot read " + file);
    std::string text{std::istreambuf_iterator<char>{in},
                     std::istreambuf_iterator<char>{}};
    out << "perplexity: tokenizing the input .." << std::endl;
    // The text's tokens as a completion's prompt gets them (llama.cpp
    // tokenizes it with the BOS too); without the special tokens they are
    // one fewer when the vocabulary adds a BOS, which then starts each
    // chunk.
    auto tokens = ids_of(post(ep, "/tokenize",
                              {{"model", model}, {"prompt", text}},
                              api_key));
    auto bare = ids_of(post(ep, "/tokenize",
                            {{"model", model},
                             {"prompt", text},
                             {"add_special_tokens", false}},
                            api_key));
    const std::int32_t bos = !tokens.empty()
                                 && tokens.size() == bare.size() + 1
                               ? tokens[0]
                               : -1;
    auto chunks = gateway::perplexity_chunks(tokens, ctx, max_chunks, bos);
    if (chunks.empty())
      throw failed("the text has " + std::to_string(tokens.size())
                   + " tokens, fewer than one chunk of "
                   + std::to_string(ctx) + " (--ctx)");
    out << "perplexity: " << chunks.size() << " chunks of " << ctx
        << " tokens (" << tokens.size() << " in the text), " << batch
        << " a request" << std::endl;
    gateway::perplexity_sum sum;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t at = 0; at < chunks.size(); at += batch) {
      json prompts = json::array();
      const std::size_t end = std::min(chunks.size(), at + batch);
      for (std::size_t i = at; i < end; ++i)
        prompts.push_back(chunks[i]);
      auto answer = post(ep, "/v1/completions",
                         {{"model", model},
                          {"prompt", prompts},
                          {"max_tokens", 0},
                          {"echo", true},
                          {"logprobs", 0},
                          {"temperature", 0}},
                         api_key);
      const auto& choices = answer.at("choices");
      if (choices.size() != end - at)
        throw failed("the gateway answered " + std::to_string(choices.size())
                     + " choices for " + std::to_string(end - at)
                     + " prompts");
      for (std::size_t i = at; i < end; ++i) {
        std::vector<double> lps;
        for (auto& v : choices.at(i - at).at("logprobs").at("token_logprobs"))
          lps.push_back(v.is_null() ? 0.0 : v.get<double>());
        if (auto why = sum.add_chunk(lps, ctx); !why.empty())
          throw failed("chunk " + std::to_string(i + 1) + ": " + why);
        char line[64];
        std::snprintf(line, sizeof line, "[%zu]%.4f,", i + 1, sum.ppl());
        out << line << std::flush;
      }
    }
    const double s = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
    char line[160];
    std::snprintf(line, sizeof line,
                  "\nFinal estimate: PPL = %.4f +/- %.5f\n"
                  "(%zu tokens scored in %zu chunks, %.2f s)\n",
                  sum.ppl(), sum.error(), sum.tokens(), sum.chunks(), s);
    out << line << std::flush;
    return 0;
  } catch (const failed& e) {
    err << "exo-node perplexity: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    err << "exo-node perplexity: the gateway's answer is not what a "
           "completion gives: "
        << e.what() << "\n";
    return 1;
  }
}

} // namespace exo
