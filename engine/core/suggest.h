// "Did you mean" for names given by users (config keys, model names, verbs).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to name, if it is close enough to be a plausible typo; else "".
std::string closest_match(std::string_view name, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" or "" — ready to append to a message.
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace tandem
