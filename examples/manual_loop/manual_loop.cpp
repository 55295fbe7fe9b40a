// The text classifier of examples/custom_model driven step by step without the Trainer: one
// thread per replica, each with its own context, model and optimizer; forward, backward, an
// all-reduce of every gradient, an optimizer step. Returns 0 when the loss fell and both
// replicas ended bitwise identical.
//   manual_loop DATA_DIR [STEPS]
#include <cstdio>
#include <string>
#include <thread>

#include "../custom_model/text_data.h"
#include "../custom_model/text_model.h"

namespace {

constexpr int kReplicas = 2;
constexpr int64_t kGlobalBatch = 32;

struct ReplicaResult {
  std::vector<double> losses;  // the global batch's mean loss at each step (replica 0)
  std::map<std::string, std::vector<float>> weights;
};

void run_replica(int rank, const std::vector<std::string>& files, int64_t steps,
                 tandem::distribute::CpuCommunicatorGroup& group, ReplicaResult& out) {
  using tandem::autograd::Variable;
  tandem::ExecutionContext ctx(tandem::Device::cpu(), /*threads=*/1, /*seed=*/0);
  ctx.bind();
  tandem::distribute::Communicator& comm = group.communicator(rank);
  tandem::nn::init::manual_seed(11);  // the same initial weights on every replica...
  text::TextClassifier model(text::TextClassifierSpec{});
  tandem::distribute::broadcast_parameters(comm, model);  // ...and replica 0's, to be sure
  auto optimizer = tandem::optim::make_optimizer(model.named_parameters(), {.name = "adamw", .lr = 0.01f});
  auto source = text::make_source(files, kReplicas, rank, kGlobalBatch / kReplicas, 5);
  tandem::Batch batch;
  tandem::Tensor loss_sum = tandem::Tensor::zeros({1});
  int64_t step = 0;
  for (int64_t epoch = 0; step < steps; ++epoch) {
    source->start_epoch(epoch);
    while (step < steps && source->next(batch)) {
      optimizer->zero_grad();
      Variable logits = model.forward(ctx, Variable(batch.at("tokens")));
      // Each replica's loss is its share of the global mean: gradients then add up across replicas.
      Variable loss = tandem::autograd::cross_entropy_loss(ctx, logits, batch.at("label"), 0.0f, kGlobalBatch);
      loss.backward(&ctx);
      for (auto& [name, p] : model.named_parameters()) comm.all_reduce(p.grad(), tandem::distribute::ReduceOp::kSum);
      optimizer->step(ctx);
      loss_sum.data<float>()[0] = loss.value().to_vector()[0];
      comm.all_reduce(loss_sum, tandem::distribute::ReduceOp::kSum);
      if (rank == 0) out.losses.push_back(loss_sum.data<float>()[0]);
      ++step;
    }
  }
  for (auto& [name, p] : model.named_parameters()) out.weights[name] = p.value().to_vector();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATA_DIR [STEPS]\n", argv[0]);
    return 2;
  }
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 48;
  try {
    std::vector<std::string> files = text::write_tfrecords(argv[1], text::TextDataSpec{});
    tandem::distribute::CpuCommunicatorGroup group(kReplicas);
    ReplicaResult results[kReplicas];
    std::vector<std::thread> threads;
    std::exception_ptr error;
    std::mutex error_mutex;
    for (int r = 0; r < kReplicas; ++r) {
      threads.emplace_back([&, r] {
        try {
          run_replica(r, files, steps, group, results[r]);
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!error) error = std::current_exception();
          group.abort("a replica failed");  // the other one stops waiting in its all-reduce
        }
      });
    }
    for (auto& t : threads) t.join();
    if (error) std::rethrow_exception(error);
    const auto& losses = results[0].losses;
    std::printf("loss %.4f at step 1, %.4f at step %zu\n", losses.front(), losses.back(), losses.size());
    const bool fell = losses.back() < 0.5 * losses.front();
    const bool identical = results[0].weights == results[1].weights;
    std::printf("%s: the loss falls\n%s: both replicas end bitwise identical\n", fell ? "ok" : "FAIL",
                identical ? "ok" : "FAIL");
    return fell && identical ? 0 : 1;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
